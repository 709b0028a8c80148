"""W&B dashboards that compare the cells, checked on the offline run files W&B writes (no network).

The `.wandb` file is W&B's transaction log: a 7-byte header, then 32 KiB blocks of records (4-byte checksum,
2-byte length, 1-byte kind: full, first, middle, last), each a `wandb_internal_pb2.Record`. `wandb sync` uploads
exactly these records, so what they hold is what the dashboard will show.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import QUICK, InProcessTraining, Spawner, compose_config, typed
from matplotlib.colors import to_rgba
from wandb_fakes import of_kind, wandb_records

from vit_locality.attention import plots
from vit_locality.config.identity import identity_hash
from vit_locality.errors import ConfigError
from vit_locality.precheck.gate import settings_from
from vit_locality.tracking.wandb_mode import quiet_wandb, resolve_mode
from vit_locality.tracking.wandb_run import run_group, run_tags


def offline_run(parent: Path) -> Path:
    runs = sorted((parent / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    return runs[0]


def history_rows(records: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for history in of_kind(records, "history"):
        rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in history.item})
    return sorted(rows, key=lambda row: row["_step"])


# --- mode=auto -----------------------------------------------------------------------------------------------------


def _home(tmp_path: Path, netrc: str | None = None, settings: str | None = None) -> dict[str, str]:
    """An environment whose home holds the given ~/.netrc and ~/.config/wandb/settings, nothing else of W&B."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    if netrc is not None:
        (home / ".netrc").write_text(netrc)
    if settings is not None:
        (home / ".config" / "wandb").mkdir(parents=True, exist_ok=True)
        (home / ".config" / "wandb" / "settings").write_text(settings)
    return {"HOME": str(home)}


KEY = "a" * 40
LOGIN = f"machine api.wandb.ai\n  login user\n  password {KEY}\n"


@pytest.mark.parametrize(
    ("setting", "env", "netrc", "settings", "expected"),
    [
        ("auto", {}, None, None, "offline"),  # nothing found: offline, a run `wandb sync` uploads later
        ("auto", {"WANDB_MODE": "online"}, None, None, "online"),  # the bug: offline unless WANDB_API_KEY
        ("auto", {"WANDB_API_KEY": KEY}, None, None, "online"),
        ("auto", {}, LOGIN, None, "online"),  # `wandb login` wrote ~/.netrc
        ("auto", {}, LOGIN.replace("api.wandb.ai", "wandb.example.org"), None, "offline"),  # another host's key
        (
            "auto",
            {"WANDB_BASE_URL": "https://wandb.example.org"},
            LOGIN.replace("api.wandb.ai", "wandb.example.org"),
            None,
            "online",
        ),  # fmt: skip
        (
            "auto",
            {},
            LOGIN.replace("api.wandb.ai", "w.example.org"),
            "[default]\nbase_url = https://w.example.org\n",
            "online",
        ),  # fmt: skip
        ("auto", {}, None, f"[default]\napi_key = {KEY}\n", "online"),
        ("auto", {}, LOGIN, "[default]\nmode = offline\n", "offline"),  # `wandb offline` wins over the login
        ("auto", {"WANDB_MODE": "offline", "WANDB_API_KEY": KEY}, LOGIN, None, "offline"),
        ("auto", {"WANDB_MODE": "disabled"}, LOGIN, None, "disabled"),
        ("auto", {"WANDB_MODE": "dryrun"}, LOGIN, None, "offline"),
        ("offline", {"WANDB_MODE": "online", "WANDB_API_KEY": KEY}, LOGIN, None, "offline"),  # explicit setting
    ],
)
def test_auto_mode_follows_wandb_mode_and_login(
    tmp_path: Path, setting: str, env: dict, netrc: str | None, settings: str | None, expected: str
) -> None:
    environ = {**_home(tmp_path, netrc, settings), **env}
    assert resolve_mode(setting, environ) == expected


def test_auto_mode_reads_the_netrc_named_by_netrc(tmp_path: Path) -> None:
    elsewhere = tmp_path / "creds"
    elsewhere.write_text(LOGIN)
    assert resolve_mode("auto", {**_home(tmp_path), "NETRC": str(elsewhere)}) == "online"


# --- grouping, tags --------------------------------------------------------------------------------------------------


def _cell(autoaug: int, cutmix: int, ls: float, seed: int, *extra: str) -> Any:
    flags = [f"aug.autoaug={bool(autoaug)}", f"aug.cutmix={bool(cutmix)}", f"loss.ls={ls}", f"seed={seed}"]
    return typed([*QUICK, "logger=wandb", "sweep_name=abl", *flags, *extra])


def test_group_is_the_cell_without_its_seed() -> None:
    cells = [(a, c, ls) for a in (0, 1) for c in (0, 1) for ls in (0.0, 0.1)]
    groups = {cell: {run_group(_cell(*cell, seed)) for seed in (0, 1, 2)} for cell in cells}
    assert all(len(seen) == 1 for seen in groups.values())  # the seeds of a cell share its group
    assert len({next(iter(seen)) for seen in groups.values()}) == 8  # the 8 cells stay apart
    (modern,) = groups[(1, 1, 0.1)]
    assert re.fullmatch(r"synthetic_vit_tiny_aa1_cm1_ls0.1(_\S+)?_cell-[0-9a-f]{8}", modern), modern
    # A swept setting keeps its cells apart, shown or not: the name's readable part, then the seedless identity.
    swept = _cell(1, 1, 0.1, 7, "run_name=synthetic_vit_tiny_aa1_cm1_ls0.1_s7_optim.lr-0.003_id-0123abcd")
    assert run_group(swept) == f"synthetic_vit_tiny_aa1_cm1_ls0.1_optim.lr-0.003_cell-{modern[-8:]}"
    lr = _cell(1, 1, 0.1, 7, "optim.lr=0.003", "run_name=synthetic_vit_tiny_aa1_cm1_ls0.1_s7_id-0123abcd")
    assert re.fullmatch(r"synthetic_vit_tiny_aa1_cm1_ls0.1_cell-[0-9a-f]{8}", run_group(lr))
    assert run_group(lr)[-8:] != modern[-8:]  # a setting the name could not show still makes another group
    assert run_group(_cell(1, 1, 0.1, 0, "logger.wandb.group=mine")) == "mine"


def test_tags_name_the_cell_the_sweep_and_the_users_tags() -> None:
    tags = run_tags(_cell(0, 1, 0.1, 0, "tags=[paper,v2]"))
    assert tags == ["-AA", "aa0", "cm1", "ls0.1", "synthetic", "vit_tiny", "sweep:abl", "paper", "v2"]


@pytest.mark.parametrize("value", ["paper", "[1,2]", "['']", f"[{'x' * 65}]"])
def test_tags_must_be_a_list_of_strings(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^tags=.* is not allowed: a list of strings") as error:
        settings_from(compose_config([*QUICK, f"tags={value}"]))
    assert "\n" not in str(error.value)


def test_tags_change_no_identity() -> None:
    plain = typed(QUICK)
    assert identity_hash(typed([*QUICK, "tags=[paper,v2]"])) == identity_hash(plain) and plain.tags == []


# --- heatmaps, noise -------------------------------------------------------------------------------------------------


def _contrast(one: tuple[float, ...], other: tuple[float, ...]) -> float:
    def luminance(rgba: tuple[float, ...]) -> float:
        lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    high, low = sorted((luminance(one), luminance(other)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_heatmap_numbers_read_on_every_cell_colour() -> None:
    values = torch.linspace(0, 1, 16).view(4, 4)
    fig = plots.layer_head_heatmap(values, "MAD, epoch 3", vmax=1.0)
    heat, bar = fig.axes  # the heatmap and its colour bar
    image = heat.images[0]
    texts = heat.texts
    assert len(texts) == 16 and bar.get_ylim() == pytest.approx((0.0, 1.0))
    for text in texts:
        head, layer = text.get_position()
        cell = image.cmap(image.norm(float(values[int(layer), int(head)])))
        # WCAG's 4.5:1 for body text, less a rounding margin at viridis' mid-point, where both colours give ~4.5.
        assert _contrast(to_rgba(text.get_color()), cell) >= 4.4, (text.get_text(), text.get_color())
    plots.plt.close(fig)


def test_wandb_is_quiet_unless_the_user_asks() -> None:
    environ: dict[str, str] = {}
    quiet_wandb(environ)
    assert environ == {"WANDB_SILENT": "true"}
    environ = {"WANDB_SILENT": "false"}
    quiet_wandb(environ)
    assert environ == {"WANDB_SILENT": "false"}


# --- one cell, end to end --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wandb_cell(tmp_path_factory: pytest.TempPathFactory, spawns: Spawner) -> dict[str, Any]:
    """A 2-epoch CutMix cell logged to W&B offline, with the final checkpoint as an artifact and two tags."""
    tmp = tmp_path_factory.mktemp("wandb_cell")
    run_dir = tmp / "run"
    args = [a for a in QUICK if not a.startswith("trainer.max_epochs")] + ["trainer.max_epochs=2"]
    args += ["protocol=modern", "logger=wandb", "logger.wandb.log_model=true", "tags=[paper,v2]", "sweep_name=abl"]
    proc = spawns.run_train([*args, f"hydra.run.dir={run_dir}"], cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wandb_dir = offline_run(run_dir)
    return {
        "proc": proc,
        "run_dir": run_dir,
        "wandb_dir": wandb_dir,
        "records": wandb_records(next(wandb_dir.glob("run-*.wandb"))),
        "record": json.loads((run_dir / "results.json").read_text()),
    }


def test_run_is_grouped_by_cell_typed_by_data_and_tagged(wandb_cell: dict[str, Any]) -> None:
    (run,) = of_kind(wandb_cell["records"], "run")
    run_name = wandb_cell["record"]["run_name"]
    assert run.display_name == run_name and "_s0" in run_name
    # The cell without its seed: the name less `_s0` and its identity, then the identity less the seed.
    assert re.fullmatch(
        re.escape(run_name.replace("_s0", "", 1)[: -len("_id-") - 8]) + "_cell-[0-9a-f]{8}", run.run_group
    )
    assert run.run_group.startswith("synthetic_vit_tiny_aa1_cm1_ls0.1_")
    assert run.job_type == "synthetic"
    assert {"Modern", "sweep:abl", "paper", "v2"} <= set(run.tags)
    assert wandb_cell["record"]["tags"] == ["paper", "v2"]


def test_config_is_the_hydra_config_alone(wandb_cell: dict[str, Any]) -> None:
    records = wandb_cell["records"]
    (run,) = of_kind(records, "run")
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["optim"]["lr"] == 1e-3 and config["aug"]["cutmix"] is True and config["tags"] == ["paper", "v2"]
    assert config["sweep_name"] == "abl" and config["loss"]["ls"] == 0.1
    # Nothing adds the module's flat arguments later (`lr` beside `optim.lr`, `cutmix` beside `aug.cutmix`).
    later = {item.key or item.nested_key[0] for update in of_kind(records, "config") for item in update.update}
    assert later <= {"_wandb"}, later
    assert not {"lr", "cutmix", "label_smoothing", "num_classes"} & set(config)


def test_one_metric_name_and_one_epoch_numbering(wandb_cell: dict[str, Any]) -> None:
    rows = history_rows(wandb_cell["records"])
    keys = {key for row in rows for key in row}
    assert "train/acc1" in keys and not any("dominant" in key for key in keys)  # CutMix cell: the same name
    epochs = {name: sorted(row["epoch"] for row in rows if name in row) for name in ("train/acc1", "test_epoch/acc1")}
    assert epochs == {"train/acc1": [1, 2], "test_epoch/acc1": [1, 2]}  # data.val_size=0: the test set
    assert sorted(row["epoch"] for row in rows if "attn/min_mad_early" in row) == [0, 1, 2]
    # In logging order the epoch never goes back: the statistics after epoch n sit with epoch n's accuracy.
    in_order = [row["epoch"] for row in rows if "epoch" in row]
    assert in_order == sorted(in_order), in_order
    run_dir = wandb_cell["run_dir"]
    with (run_dir / "csv" / "metrics.csv").open() as handle:
        logged = list(csv.DictReader(handle))
    assert sorted(float(r["epoch"]) for r in logged if r.get("train/acc1")) == [1.0, 2.0]
    with (run_dir / "attention_stats.csv").open() as handle:
        assert {int(r["epoch"]) for r in csv.DictReader(handle)} == {0, 1, 2}
    record = wandb_cell["record"]
    assert record["epochs"] == 2 and "train/acc1" in record["metrics"] and "epoch" not in record["metrics"]


def test_run_files_and_checkpoint_reach_wandb_before_it_finishes(wandb_cell: dict[str, Any]) -> None:
    records = wandb_cell["records"]
    kinds = [r.WhichOneof("record_type") for r in records]
    uploaded = {f.path: i for i, r in enumerate(records) if kinds[i] == "files" for f in r.files.files}
    wanted = ("results.json", "attention_stats.csv", "attention_mad_entropy.png", "attention_central_maps.png")
    assert set(wanted) <= set(uploaded), sorted(uploaded)
    assert max(uploaded[name] for name in wanted) < kinds.index("exit")
    saved = json.loads((wandb_cell["wandb_dir"] / "files" / "results.json").read_text())
    assert saved["status"] == "complete"  # the finished record, not the `running` one
    models = [a for a in of_kind(records, "artifact") if a.type == "model"]
    assert len(models) == 1 and [c.path for c in models[0].manifest.contents] == ["last.ckpt"]
    assert "final" in models[0].aliases
    (exit_record,) = of_kind(records, "exit")
    assert exit_record.exit_code == 0


def test_wandb_chatter_is_silenced_and_the_sync_command_shown(wandb_cell: dict[str, Any]) -> None:
    proc = wandb_cell["proc"]
    assert [line for line in proc.stderr.splitlines() if line.startswith("wandb:")] == []
    assert f"wandb sync {wandb_cell['wandb_dir']}" in proc.stdout + proc.stderr


# spawns: wandb.init starts W&B's service process (and runs git), offline too.
def test_a_failed_cell_marks_its_run_failed_and_upload_errors_never_fail_a_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, spawns: Spawner
) -> None:
    import wandb

    from vit_locality.tracking.wandb_run import ConfigWandbLogger, finish_wandb, publish_run_files

    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "results.json").write_text("{}")
    logger = ConfigWandbLogger(project="p", save_dir=str(tmp_path), mode="offline", id="failedcell")

    def broken_save(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(logger.experiment, "save", broken_save)
    publish_run_files([logger], tmp_path)  # a warning, not an exception: the record on disk is what counts
    assert "W&B upload of the run's files failed (OSError: disk full)" in caplog.text
    finish_wandb([logger], failed=True)
    wandb.teardown()
    (exit_record,) = of_kind(wandb_records(next(offline_run(tmp_path).glob("run-*.wandb"))), "exit")
    assert exit_record.exit_code == 1


def sweep_runs(spawns: Spawner, sweep: Path, swept: list[str]) -> list[Path]:
    """The offline W&B runs of a quick multirun with `logger=wandb` over `swept`, as a user starts it."""
    args = ["-m", *QUICK, "logger=wandb", "stats.pictures=false", *swept, f"hydra.sweep.dir={sweep}"]
    sweep.parent.mkdir(parents=True, exist_ok=True)
    proc = spawns.run_train(args, cwd=sweep.parent, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sorted(sweep.glob("*/wandb/offline-run-*"))


def test_a_sweep_gives_one_group_per_cell_and_one_run_per_seed(tmp_path: Path, spawns: Spawner) -> None:
    """Cells of one multirun share a process: each gets its own run, seeds of a cell share a group, and the README's
    `wandb sync multirun/<sweep>/*/wandb/offline-run-*` names every run of the sweep."""
    runs = sweep_runs(spawns, tmp_path / "multirun" / "abl", ["seed=0,1", "aug.cutmix=true,false"])
    assert len(runs) == 4
    seen = [of_kind(wandb_records(next(run.glob("run-*.wandb"))), "run")[0] for run in runs]
    assert len({run.run_id for run in seen}) == 4
    groups: dict[str, set[str]] = {}
    for run in seen:
        groups.setdefault(run.run_group, set()).add(run.display_name)
    # protocol=modern (the default) keeps AA and LS on; the two CutMix settings are the two cells.
    assert [re.sub("_cell-.*", "", group) for group in sorted(groups)] == [
        f"synthetic_vit_tiny_aa1_cm{cm}_ls0.1_data.batch_size-64_data.test_size-64_data.train_size-256" for cm in (0, 1)
    ]
    assert all(len(names) == 2 for names in groups.values())


def test_a_packed_sweep_gives_each_cell_its_own_run(tmp_path: Path, spawns: Spawner) -> None:
    """hydra/launcher=packed trains the cells in one process, one fused model: each cell still has its own W&B run,
    with its own epoch figures and its test figures."""
    runs = sweep_runs(spawns, tmp_path / "multirun" / "packed", ["aug.cutmix=true,false", "hydra/launcher=packed"])
    assert len(runs) == 2
    records = [wandb_records(next(run.glob("run-*.wandb"))) for run in runs]
    assert len({of_kind(found, "run")[0].run_id for found in records}) == 2
    for found in records:
        logged = set().union(*(row.keys() for row in history_rows(found)))
        assert {"test_epoch/acc1", "train/loss_epoch", "test/acc1", "attn/min_mad_early"} <= logged, logged


# --- the report run --------------------------------------------------------------------------------------------------


# spawns: wandb.init starts W&B's service process (and runs git), offline too.
def test_report_publishes_tables_figures_scatter_and_layer_curves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawns: Spawner
) -> None:
    from record_fakes import ACC100, ENT100, MAD100, ORDER, write_run

    from vit_locality.report.__main__ import main

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    sweep = tmp_path / "abl"
    config = {"logger": {"wandb": {"project": "locality-paper", "entity": None}}}
    for cell in ORDER:
        write_run(sweep, "cifar100", cell, 0, ACC100[cell][0], MAD100[cell][0], ENT100[cell][0], config=config)
    out = tmp_path / "out"
    assert main(["all", str(sweep), "--out", str(out), "--wandb"]) == 0
    import wandb

    wandb.teardown()  # what the command's exit does: W&B's service writes out the run's last records
    wandb_dir = offline_run(out)
    records = wandb_records(next(wandb_dir.glob("run-*.wandb")))
    (run,) = of_kind(records, "run")
    assert run.project == "locality-paper" and run.job_type == "report" and "sweep:abl" in run.tags
    (row,) = history_rows(records)
    stems = {path.stem for path in out.glob("*.csv")}  # every table and part the report wrote
    assert {key.split("/")[1] for key in row if key.startswith("tables/") and key.endswith("/_type")} == stems
    pngs = {path.stem for path in out.glob("*.png")}
    assert {key.split("/")[1] for key in row if key.startswith("figures/") and key.endswith("/_type")} == pngs
    charts = {}
    for update in of_kind(records, "config"):
        for item in update.update:
            if list(item.nested_key[:2]) == ["_wandb", "visualize"]:
                charts[item.nested_key[2]] = json.loads(item.value_json)["panel_config"]["panelDefId"]
    assert charts == {
        "runs/min_mad_vs_top1": "wandb/scatter/v0",
        "layers/min_mad_cifar100_vit_paper": "wandb/lineseries/v0",
    }
    table = json.loads((wandb_dir / "files" / row["runs/all/path"]).read_text())
    points = {(r[1], r[5], round(r[6], 6)) for r in table["data"]}
    assert points == {(cell, MAD100[cell][0], round(ACC100[cell][0], 6)) for cell in ORDER}
    curves = json.loads((wandb_dir / "files" / row["layers/min_mad_cifar100_vit_paper_table/path"]).read_text())
    baseline = [value for _, cell, value in curves["data"] if cell == "Baseline"]
    # write_run's heads: MAD + 0.05 layer + 0.01 head, with layer 2's head 0 at half the MAD.
    assert baseline == pytest.approx([0.316, 0.366, 0.158])


# --- the run id follows the cell, not its folder ---------------------------------------------------------------------


def test_a_copied_cell_retagged_elsewhere_keeps_its_wandb_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trains: InProcessTraining
) -> None:
    """The README's workflow: a sweep folder copied elsewhere and a cell re-tagged there. The tag update continues
    the cell's W&B run (the id its record holds from the first start), so `wandb sync` merges it into that run
    instead of creating a run that holds only the tags. A record from before ids were recorded: its W&B files'."""
    import shutil

    import wandb

    from vit_locality.tracking.wandb_run import RUN_ID_ENTRY

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    args = [*QUICK, "logger=wandb", "stats.enabled=false"]
    original = tmp_path / "sweep" / "cell"
    record = trains.run_cell_as_train(compose_config([*args, "tags=[first]"]), original)
    wandb.teardown()
    run_id = record[RUN_ID_ENTRY]
    (first,) = (original / "wandb").glob("offline-run-*")
    assert first.name.endswith(f"-{run_id}")
    assert json.loads((original / "results.json").read_text())[RUN_ID_ENTRY] == run_id

    def retagged_id(run_dir: Path) -> str:
        before = set((run_dir / "wandb").glob("offline-run-*"))
        trains.run_cell_as_train(compose_config([*args, "tags=[first,paper]"]), run_dir)
        wandb.teardown()
        (update,) = set((run_dir / "wandb").glob("offline-run-*")) - before
        (run,) = {r.run_id for r in of_kind(wandb_records(next(update.glob("run-*.wandb"))), "run")}
        return run

    assert retagged_id(shutil.copytree(original, tmp_path / "copy" / "cell")) == run_id
    older = shutil.copytree(original, tmp_path / "older" / "cell")
    saved = json.loads((older / "results.json").read_text())
    del saved[RUN_ID_ENTRY]
    (older / "results.json").write_text(json.dumps(saved))
    assert retagged_id(older) == run_id
