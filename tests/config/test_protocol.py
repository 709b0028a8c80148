"""The one TrainingProtocol type: derived from the settings (checked, with their one-line messages) or from a record
(older records included), and the single source of the description, the record section, the cell name, the W&B
tags and the report's grouping. Also the module's typed settings and older checkpoints' flat hyper-parameters."""

from __future__ import annotations

import sys

import pytest
import torch
from helpers import CONF, Spawner, typed
from omegaconf import OmegaConf

from vit_locality.config.protocol import AugConfig, TrainingProtocol
from vit_locality.config.refusal import typed_section
from vit_locality.config.schema import OptimConfig
from vit_locality.errors import ConfigError
from vit_locality.model.classifier import ViTClassifier, adamw_with_decay_groups
from vit_locality.model.vit import VisionTransformer

# A record's protocol section as train.py wrote it before this type existed (no mixup key at all).
OLD_RECORD = {
    "autoaug": True,
    "cutmix": True,
    "ls": 0.1,
    "policy": "cifar10",
    "cutmix_alpha": 1.0,
    "cutmix_prob": 0.5,
    "description": "crop+flip | autoaugment(cifar10) | cutmix(alpha=1.0, p=0.5) | ls=0.1",
    "autoaug_device": "cpu",
}


def protocol_of(*overrides: str, on_device: bool = False) -> TrainingProtocol:
    """The protocol of a cell of these overrides, derived from its settings (on_device: its data on the device)."""
    settings = typed(["data=synthetic", "model=vit_tiny", *overrides])
    return TrainingProtocol.of(settings.aug, settings.loss, settings.data.spec.default_policy, on_device)


def test_protocol_imports_without_torch(spawns: Spawner) -> None:
    """The config checks build it before torch loads."""
    import subprocess

    code = "import sys, vit_locality.config.protocol; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_the_settings_resolve_the_policy_and_where_autoaugment_runs() -> None:
    cell = ("aug.autoaug=true", "aug.cutmix=true", "aug.cutmix_prob=0.5", "loss.ls=0.1")
    protocol = protocol_of(*cell)
    assert protocol == TrainingProtocol(autoaug=True, policy="cifar10", cutmix=True, cutmix_prob=0.5, ls=0.1)
    assert protocol_of(*cell, on_device=True).autoaug_device == "data_on_device"
    assert protocol_of("aug.autoaug=true", "aug.policy=svhn").policy == "svhn"
    batched = protocol_of("aug.autoaug=true", "aug.device=gpu")
    assert batched.batched_autoaugment and not batched.per_sample_autoaugment


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("aug.cutmix_alpha=-1", "aug.cutmix_alpha=-1 is not allowed: > 0, finite"),  # the value as typed
        ("aug.cutmix_alpha=inf", "aug.cutmix_alpha=inf is not allowed: > 0, finite"),
        ("aug.cutmix_prob=1.5", "aug.cutmix_prob=1.5 is not allowed: a number in [0, 1]"),
        ("aug.cutmix_prob=-0.1", "aug.cutmix_prob=-0.1 is not allowed: a number in [0, 1]"),
        ("loss.ls=1.0", "loss.ls=1.0 is not allowed: a number in [0, 1)"),
        ("loss.ls=-0.1", "loss.ls=-0.1 is not allowed: a number in [0, 1)"),
    ],
)
def test_out_of_range_settings_fail_in_one_line(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        protocol_of(override)
    assert str(caught.value) == message


EDGES = ["aug.cutmix_alpha=0.01", "aug.cutmix_prob=0", "aug.cutmix_prob=1", "loss.ls=0.99"]


@pytest.mark.parametrize("override", EDGES)
def test_settings_at_the_edges_of_their_ranges_pass(override: str) -> None:
    protocol_of(override)


AUG = OmegaConf.to_container(OmegaConf.load(CONF / "aug" / "default.yaml"))


def test_the_aug_section_checks_its_flags_ranges_and_one_mixer() -> None:
    """The fields' ranges and the rule across them, declared on the typed `aug` section itself."""
    with pytest.raises(ConfigError, match=r"^aug.cutmix=1 is not allowed: true or false$"):
        typed_section(AugConfig, {**AUG, "cutmix": 1}, "aug")
    with pytest.raises(ConfigError, match=r"^aug.cutmix_alpha=-1 is not allowed: > 0, finite$"):
        typed_section(AugConfig, {**AUG, "cutmix_alpha": -1}, "aug")
    with pytest.raises(ConfigError, match=r"^aug.mixup=True is not allowed: false when aug.cutmix=true"):
        typed_section(AugConfig, {**AUG, "cutmix": True, "mixup": True}, "aug")
    assert typed_section(AugConfig, {k: v for k, v in AUG.items() if k != "mixup"}, "aug").mixup is False
    assert typed_section(AugConfig, {**AUG, "mixup_alpha": 2}, "aug").mixup_alpha == 2.0  # an int is taken as a float


def test_colorjitter_cannot_run_batched() -> None:
    with pytest.raises(ConfigError, match=r"^aug.device='gpu' is not allowed: cpu when the policy is colorjitter"):
        protocol_of("aug.autoaug=true", "aug.device=gpu", "aug.policy=colorjitter")
    protocol_of("aug.autoaug=false", "aug.device=gpu", "aug.policy=colorjitter")  # nothing runs


def test_describe_line() -> None:
    assert TrainingProtocol().describe() == "crop+flip"
    modern = TrainingProtocol(autoaug=True, policy="cifar10", cutmix=True, ls=0.1)
    assert modern.describe() == "crop+flip | autoaugment(cifar10) | cutmix(alpha=1.0) | ls=0.1"
    half = TrainingProtocol(cutmix=True, cutmix_alpha=0.5, cutmix_prob=0.5)
    assert half.describe() == "crop+flip | cutmix(alpha=0.5, p=0.5)"
    jitter = TrainingProtocol(autoaug=True, policy="colorjitter", autoaug_device="data_on_device")
    assert jitter.describe() == "crop+flip | colorjitter(0.4,0.4,0.4, batched on the device)"
    assert TrainingProtocol(autoaug=True, policy="svhn", autoaug_device="gpu").describe() == (
        "crop+flip | autoaugment(svhn, batched on gpu)"
    )


def test_an_older_record_reads_as_it_was_written() -> None:
    protocol = TrainingProtocol.from_record(OLD_RECORD)
    assert protocol == TrainingProtocol(autoaug=True, policy="cifar10", cutmix=True, cutmix_prob=0.5, ls=0.1)
    assert protocol.describe() == OLD_RECORD["description"]
    assert {k: v for k, v in protocol.record().items() if k in OLD_RECORD} == OLD_RECORD
    assert protocol.cell_name == "Modern"


def test_a_record_without_cutmix_settings_takes_the_defaults() -> None:
    """Settings that do not apply are recorded as None (and records older than cutmix_prob lack it)."""
    record = {"autoaug": False, "cutmix": False, "ls": 0.0, "policy": None, "cutmix_alpha": None}
    assert TrainingProtocol.from_record(record) == TrainingProtocol()
    assert TrainingProtocol.from_record({**record, "cutmix": True, "cutmix_prob": 0.0}).cutmix_prob == 0.0


def test_record_round_trips() -> None:
    for protocol in (
        TrainingProtocol(),
        TrainingProtocol(
            autoaug=True,
            policy="imagenet",
            autoaug_device="gpu",
            cutmix=True,
            cutmix_alpha=0.3,
            cutmix_prob=0.7,
            ls=0.2,
        ),
    ):
        assert TrainingProtocol.from_record(protocol.record()) == protocol


def test_tags_name_the_cell_and_its_flags() -> None:
    assert TrainingProtocol(autoaug=True, cutmix=True, ls=0.1).tags() == ["Modern", "aa1", "cm1", "ls0.1"]
    assert TrainingProtocol().tags() == ["Baseline", "aa0", "cm0", "ls0"]


def test_group_key_keeps_the_grouped_fields_only() -> None:
    """Two runs of one cell that differ in a CutMix setting share a group (the report notes the difference);
    runs with another label smoothing do not (the report pools and notes them by cell)."""
    a = TrainingProtocol(
        autoaug=True, policy="cifar10", autoaug_device="cpu", cutmix=True, cutmix_alpha=1.0, cutmix_prob=1.0, ls=0.1
    )
    b = TrainingProtocol(
        autoaug=True, policy="cifar10", autoaug_device="gpu", cutmix=True, cutmix_alpha=0.5, cutmix_prob=0.5, ls=0.1
    )
    assert a.group_key() == b.group_key()
    assert (
        a.group_key()
        != TrainingProtocol(
            autoaug=True, policy="cifar10", autoaug_device="cpu", cutmix=True, cutmix_alpha=1.0, cutmix_prob=1.0, ls=0.2
        ).group_key()
    )
    assert a.group_key().cell_name == "Modern"


# ---- the module's typed settings ------------------------------------------------------------------------------


def test_the_architecture_is_the_model_section_less_what_does_not_shape_the_network() -> None:
    settings = typed(["data=synthetic", "model=vit_convstem", "model.depth=2"])
    architecture = settings.model.architecture()
    assert architecture == {"depth": 2, "dim": 192, "heads": 8, "mlp_ratio": 2.0, "drop_path": 0.0, "stem": "conv"}
    assert len(VisionTransformer(num_classes=3, image_size=32, **architecture).blocks) == 2


def test_no_weight_decay_names_what_the_optimizer_leaves_undecayed() -> None:
    model = VisionTransformer(num_classes=3, image_size=16, depth=1, dim=16, heads=2)
    assert model.no_weight_decay() == {"cls_token", "pos_embed"}
    names = {id(p): n for n, p in model.named_parameters()}
    _, undecayed = adamw_with_decay_groups(model, 1e-3, 0.05, (0.9, 0.999)).param_groups
    assert {"cls_token", "pos_embed"} <= {names[id(p)] for p in undecayed["params"]}
    model.no_weight_decay = lambda: set()  # the optimizer asks the model, it does not know the names itself
    decayed, _ = adamw_with_decay_groups(model, 1e-3, 0.05, (0.9, 0.999)).param_groups
    assert {"cls_token", "pos_embed"} <= {names[id(p)] for p in decayed["params"]}


SMALL = {"depth": 1, "dim": 16, "heads": 2, "mlp_ratio": 2.0}


def test_hyper_parameters_are_plain_dicts_and_load_weights_only(tmp_path) -> None:
    protocol = TrainingProtocol(cutmix=True, ls=0.1)
    optim = {**OptimConfig().model_dump(), "lr": 0.01}
    module = ViTClassifier(3, 16, [0.5] * 3, [0.25] * 3, SMALL, protocol, optim)
    assert module.hparams["model"] == SMALL and module.model.blocks[0].attn.heads == 2
    assert module.hparams["protocol"]["cutmix"] is True and module.hparams["optim"]["lr"] == 0.01
    path = tmp_path / "m.ckpt"
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, path)
    hparams = torch.load(path, weights_only=True)["hyper_parameters"]
    again = ViTClassifier(**hparams)
    assert (again.protocol, again.optim, again.hparams["model"]) == (protocol, optim, SMALL)


def test_the_previous_releases_checkpoint_hyper_parameters_build_the_module() -> None:
    """As the previous release saved them: the architecture with all seven keys, the protocol without `device`,
    the optimiser's betas a tuple."""
    saved = {
        "num_classes": 3,
        "image_size": 16,
        "mean": [0.5] * 3,
        "std": [0.25] * 3,
        "model": {**SMALL, "stem": "patch", "pos_init": "learned", "drop_path": 0.0},
        "protocol": {**OLD_RECORD, "mixup": False, "mixup_alpha": 1.0},
        "optim": {"lr": 0.002, "weight_decay": 0.05, "betas": (0.9, 0.99), "warmup_epochs": 1.0, "min_lr_ratio": 0.0},
        "nonfinite_check_every": 1,
        "compile_model": False,
    }
    saved["protocol"].pop("description")
    module = ViTClassifier(**saved)
    assert module.protocol == TrainingProtocol.from_record(OLD_RECORD) and module.protocol.cutmix_prob == 0.5
    assert module.optim["betas"] == (0.9, 0.99) and module.optim["lr"] == 0.002


def test_a_run_that_never_mixed_is_not_a_cutmix_cell() -> None:
    """aug.cutmix=true with cutmix_prob=0 trains Baseline: its cell, tags and report group say so."""
    never = TrainingProtocol(cutmix=True, cutmix_prob=0.0)
    assert never.flags == (False, False, False) and never.cell_name == "Baseline"
    assert "cm0" in never.tags() and never.group_key() == TrainingProtocol().group_key()
    sometimes = TrainingProtocol(cutmix=True, cutmix_prob=0.5)
    assert sometimes.flags == (False, True, False) and sometimes.cell_name == "+CM" and "cm1" in sometimes.tags()
    assert TrainingProtocol.from_record(never.record()).cell_name == "Baseline"
