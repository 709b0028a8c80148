"""The architectures and saved sweeps added for the instruments: a ViT-B-sized config, the convolutional stem, and
the dose-response experiments."""

from __future__ import annotations

import pytest
import torch
import yaml
from helpers import CONF, compose_config, typed

from vit_locality.errors import ConfigError
from vit_locality.model.vit import VisionTransformer, count_parameters
from vit_locality.precheck.gate import settings_from


def test_conv_stem_keeps_the_grid_and_sees_only_its_neighbourhood() -> None:
    """Two stride-2 3 x 3 convolutions reach 7 px around a 4 px token: a pixel changed in the top-left corner moves
    the first token's embedding and leaves a token three patches away untouched. 64 px images (8 px patches) take
    three convolutions; either way the grid stays 8 x 8 and the attention maps 65 x 65."""
    torch.manual_seed(0)
    model = VisionTransformer(num_classes=10, image_size=32, depth=2, dim=32, heads=2, stem="conv").eval()
    strided = [m for m in model.patch_embed if isinstance(m, torch.nn.Conv2d) and m.stride == (2, 2)]
    assert len(strided) == 2
    images = torch.randn(1, 3, 32, 32)
    changed = images.clone()
    changed[0, :, 0, 0] += 5.0
    with torch.no_grad():
        before, after = model.embed(images), model.embed(changed)
        _, maps = model.forward_with_attention(images)
    assert before.shape == (1, 65, 32) and maps[0].shape == (1, 2, 65, 65)
    assert not torch.allclose(before[0, 1], after[0, 1])  # token of patch (0, 0)
    torch.testing.assert_close(before[0, 1 + 3 * 8 + 3], after[0, 1 + 3 * 8 + 3])  # patch (3, 3)
    big = VisionTransformer(num_classes=10, image_size=64, depth=1, dim=32, heads=2, stem="conv")
    assert sum(isinstance(m, torch.nn.Conv2d) and m.stride == (2, 2) for m in big.patch_embed) == 3
    assert big(torch.randn(2, 3, 64, 64)).shape == (2, 10)


def test_stem_settings_that_cannot_work_are_refused_before_anything_is_built() -> None:
    with pytest.raises(ConfigError, match=r"^model.stem='convolution' is not allowed: one of patch, conv$"):
        typed(["model=vit_convstem", "data=synthetic", "model.stem=convolution"])
    with pytest.raises(ConfigError, match=r"^data.image_size=48 is not allowed: .* power of 2 .*model.stem=conv"):
        typed(["model=vit_convstem", "data=synthetic", "data.image_size=48"])  # 6 px patches
    typed(["model=vit_convstem", "data=synthetic", "data.image_size=48", "model.stem=patch"])


def test_model_configs_compose_and_validate() -> None:
    base = compose_config(["model=vit_base", "data=synthetic"])
    settings_from(base, machine=False)
    arch = {k: base.model[k] for k in ("depth", "dim", "heads", "mlp_ratio")}
    assert arch == {"depth": 12, "dim": 768, "heads": 12, "mlp_ratio": 4.0}
    assert count_parameters(VisionTransformer(num_classes=100, **arch)) == 85_221_220
    conv = compose_config(["model=vit_convstem", "data=synthetic"])
    settings_from(conv, machine=False)
    assert conv.model.stem == "conv" and conv.model.depth == 8 and conv.model.dim == 192


def test_the_training_module_builds_the_configured_stem() -> None:
    from vit_locality.model.classifier import ViTClassifier

    architecture = typed(["model=vit_convstem", "data=synthetic"]).model.architecture()
    module = ViTClassifier(num_classes=10, image_size=32, mean=[0.5] * 3, std=[0.25] * 3, model=architecture)
    assert isinstance(module.model.patch_embed, torch.nn.Sequential)


@pytest.mark.parametrize(
    ("name", "key", "values"),
    [
        ("dose_cutmix_alpha", "aug.cutmix_alpha", "0.25,0.5,1,2,4"),
        ("dose_cutmix_prob", "aug.cutmix_prob", "0,0.25,0.5,0.75,1"),
        ("dose_ls", "loss.ls", "0,0.05,0.1,0.2,0.3"),
    ],
)
def test_dose_experiments_vary_one_knob_from_baseline(name: str, key: str, values: str) -> None:
    """Each saved dose sweep starts from Baseline (no AutoAugment, no smoothing; CutMix on for the CutMix knobs) and
    includes the paper's own settings among its values."""
    params = yaml.safe_load((CONF / "experiment" / f"{name}.yaml").read_text())["hydra"]["sweeper"]["params"]
    assert params == {key: values}
    cfg = compose_config([f"experiment={name}"])
    settings_from(cfg, machine=False)
    assert not cfg.aug.autoaug and cfg.loss.ls == 0
    assert cfg.aug.cutmix == key.startswith("aug.cutmix")
    paper = {"aug.cutmix_alpha": ["1"], "aug.cutmix_prob": ["0", "1"], "loss.ls": ["0", "0.1"]}[key]
    assert set(paper) <= set(values.split(","))
