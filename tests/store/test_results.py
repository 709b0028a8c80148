"""The run record's one home: written with status last, read through one checker whose reasons every reader shows."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from helpers import typed
from record_fakes import BAD_RECORDS, complete_payload

from vit_locality.report.__main__ import main as report_main
from vit_locality.report.summary import main as summary_main
from vit_locality.store.record import RECORD_SIZE_LIMIT, RecordError, read_record, scan_records, write_record


def test_status_is_written_last_and_read_back(tmp_path: Path) -> None:
    path = write_record(tmp_path, {**complete_payload(), "status": "running"}, status="complete")
    text = path.read_text()
    assert list(json.loads(text))[-1] == "status" and text.rstrip().endswith('"status": "complete"\n}')
    record = read_record(tmp_path)
    assert record is not None and record.complete and record.protocol.cutmix and record.protocol.ls == 0.1
    headline = record.headline()
    assert (headline.acc1, headline.min_mad, headline.entropy) == (0.75, 0.4, 0.9)  # accuracy stays a fraction
    with pytest.raises(ValueError, match="status='done'"):
        write_record(tmp_path, complete_payload(), status="done")


def test_no_record_is_none_not_an_error(tmp_path: Path) -> None:
    assert read_record(tmp_path) is None


@pytest.mark.parametrize("case", list(BAD_RECORDS))
def test_every_malformed_record_has_one_reason(tmp_path: Path, case: str) -> None:
    content, reason = BAD_RECORDS[case]
    (tmp_path / "results.json").write_bytes(content)
    with pytest.raises(RecordError, match=reason.replace("(", r"\(")) as caught:
        read_record(tmp_path)
    assert "\n" not in str(caught.value)


FINAL = {"min_mad_early": 0.4, "mean_entropy_early": 0.9}
SCHEMA_REFUSALS = {  # each rule of the record's schema, broken once: the one line names the key, value and rule
    "protocol.ls='0.1' of the wrong type": {"protocol": {"autoaug": False, "cutmix": True, "ls": "0.1"}},
    "protocol.cutmix='true' of the wrong type": {"protocol": {"autoaug": False, "cutmix": "true", "ls": 0}},
    "seed=True of the wrong type": {"seed": True},
    "data.name=3 of the wrong type": {"data": {"name": 3}},
    "lacks model.name": {"model": {}},
    "lacks metrics.test/acc1": {"metrics": {"val/acc1": 0.5}},
    "metrics.test/acc1=1.5, not a fraction in [0, 1]": {"metrics": {"test/acc1": 1.5}},
    "attention=[], not a JSON object": {"attention": []},
    "attention.final=3, not a JSON object": {"attention": {"final": 3}},
    "attention.final.early_layers=0, not an integer >= 1": {"attention": {"final": {**FINAL, "early_layers": 0}}},
    "attention.final.per_layer={}, not a JSON list": {"attention": {"final": {**FINAL, "per_layer": {}}}},
    "attention.final.per_head=[], not a JSON object": {"attention": {"final": {**FINAL, "per_head": []}}},
    "lacks attention.final.mean_entropy_early": {"attention": {"final": {"min_mad_early": 0.4}}},
    "attention.final.per_layer={'0': 0, '1': 1, '10': 10, '100': 100, ...}, not a JSON list": {
        "attention": {"final": {**FINAL, "per_layer": {str(i): i for i in range(10_000)}}}
    },
}


@pytest.mark.parametrize("reason", list(SCHEMA_REFUSALS))
def test_each_schema_rule_refuses_with_its_key_and_value(tmp_path: Path, reason: str) -> None:
    write_record(tmp_path, complete_payload(**SCHEMA_REFUSALS[reason]), status="complete")
    with pytest.raises(RecordError) as caught:
        read_record(tmp_path)
    assert str(caught.value).endswith(f"malformed: {'' if reason.startswith('lacks') else 'has '}{reason}")


@pytest.mark.parametrize(
    "changes",
    [
        {"protocol": {"autoaug": True, "cutmix": False, "ls": 0, "mixup": False}},  # ls an integer; keys it adds pass
        {"attention": None},
        {"attention": {"final": None, "initial": {}}},
        {"attention": {"final": {**FINAL, "per_head": {"mad": [[0.1]]}, "per_layer": [{"layer": 0}]}}},
        {"metrics": {"test/acc1": 0, "val/acc1": "n/a"}},
    ],
)
def test_records_within_the_schema_read(tmp_path: Path, changes: dict) -> None:
    write_record(tmp_path, complete_payload(**changes), status="complete")
    assert read_record(tmp_path).complete


def test_a_running_record_needs_only_its_status(tmp_path: Path) -> None:
    write_record(tmp_path, {"seed": "not yet"}, status="running")
    assert read_record(tmp_path).status == "running"


def test_a_directory_named_results_json(tmp_path: Path) -> None:
    (tmp_path / "results.json").mkdir()
    with pytest.raises(RecordError, match="unreadable: a directory"):
        read_record(tmp_path)


def _sweep_with_every_bad_record(root: Path) -> Path:
    sweep = root / "sweep"
    write_record(sweep / "good", complete_payload(), status="complete")
    for index, (content, _) in enumerate(BAD_RECORDS.values()):
        (sweep / f"bad{index}").mkdir(parents=True)
        (sweep / f"bad{index}" / "results.json").write_bytes(content)
    (sweep / "dir" / "results.json").mkdir(parents=True)
    return sweep


def test_every_reader_skips_and_lists_the_same_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = _sweep_with_every_bad_record(tmp_path)
    scan = scan_records([sweep])
    assert [r.run_dir.name for r in scan.complete] == ["good"]
    assert len(scan.skipped) == len(BAD_RECORDS) + 1
    assert summary_main([str(sweep)]) == 0
    summary = capsys.readouterr().out
    assert summary.count("skipped ") == len(BAD_RECORDS) + 1 and "75.00 " in summary  # percent only when printed
    assert report_main(["protocols", str(sweep), "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.count("skipped ") == len(BAD_RECORDS) + 1


def test_linked_run_directories_are_followed_once(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / "run"
    write_record(elsewhere, complete_payload(), status="complete")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "linked").symlink_to(elsewhere, target_is_directory=True)
    (sweep / "loop").symlink_to(sweep, target_is_directory=True)  # a cycle must end
    scan = scan_records([sweep])
    assert [r.run_dir.name for r in scan.complete] == ["linked"]


def _summary_in_thread(sweep: Path) -> threading.Thread:
    worker = threading.Thread(target=summary_main, args=([str(sweep)],), daemon=True)
    worker.start()
    worker.join(timeout=20)
    return worker


def test_a_fifo_named_results_json_is_skipped_not_waited_on(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`mkfifo results.json`: a reader that opened it would wait for a writer forever."""
    write_record(tmp_path / "sweep" / "good", complete_payload(), status="complete")
    fifo = tmp_path / "sweep" / "fifo" / "results.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    worker = _summary_in_thread(tmp_path / "sweep")
    if worker.is_alive():  # free the blocked reader so the test process can end, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(timeout=5)
        pytest.fail("report.summary waited on a FIFO named results.json")
    assert "a FIFO, not a regular file; skipped" in capsys.readouterr().out
    with pytest.raises(RecordError, match=r"^results.json is unreadable: a FIFO, not a regular file; skipped$"):
        read_record(fifo.parent)


def test_a_link_to_dev_zero_or_a_huge_file_is_skipped_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "zero").mkdir()
    (tmp_path / "zero" / "results.json").symlink_to("/dev/zero")
    with pytest.raises(RecordError, match="a character device, not a regular file"):
        read_record(tmp_path / "zero")
    (tmp_path / "huge").mkdir()
    with (tmp_path / "huge" / "results.json").open("wb") as huge:
        huge.truncate(RECORD_SIZE_LIMIT + 1)  # sparse: costs no disk
    with pytest.raises(RecordError, match="larger than 64 MiB; skipped"):
        read_record(tmp_path / "huge")


def test_the_identity_names_the_random_stream_version(monkeypatch) -> None:
    """A checkpoint or record of an older random stream must not pass for this one: the version is in the hash."""
    from helpers import QUICK

    import vit_locality.config.identity as identity

    cfg = typed(QUICK)
    now = identity.identity_hash(cfg)
    monkeypatch.setattr(identity, "RANDOM_STREAM_VERSION", identity.RANDOM_STREAM_VERSION - 1)
    assert identity.identity_hash(cfg) != now


def test_the_process_count_is_part_of_the_identity() -> None:
    """Two processes mix their own halves of the batch: not the one-process cell (a later run was skipped as it)."""
    from helpers import QUICK

    from vit_locality.config.identity import identity_hash

    one = identity_hash(typed([*QUICK, "trainer.devices=1"]))
    assert identity_hash(typed([*QUICK, "trainer.devices=2"])) != one
    assert identity_hash(typed([*QUICK, "trainer.devices=[0]"])) == one  # one device, named or counted
