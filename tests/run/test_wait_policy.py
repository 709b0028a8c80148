"""CPU runs let torch's OpenMP threads sleep while they wait (OMP_WAIT_POLICY=PASSIVE), set by the entry point before
torch loads, unless the user chose a policy or a CUDA device is visible."""

from __future__ import annotations

import pytest

from vit_locality.run import threads
from vit_locality.run.threads import sleep_while_waiting


@pytest.fixture
def no_torch_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the entry point starts: torch not imported (this test process has it: hidden from the check)."""
    monkeypatch.delitem(threads.sys.modules, "torch", raising=False)


def test_a_cpu_run_sleeps_while_waiting(monkeypatch: pytest.MonkeyPatch, no_torch_yet: None) -> None:
    monkeypatch.setattr(threads, "cuda_device_visible", lambda environ: False)
    environ: dict[str, str] = {}
    assert sleep_while_waiting(environ) and environ == {"OMP_WAIT_POLICY": "PASSIVE"}
    chosen = {"OMP_WAIT_POLICY": "ACTIVE"}  # the user's choice stays
    assert not sleep_while_waiting(chosen) and chosen == {"OMP_WAIT_POLICY": "ACTIVE"}


def test_a_gpu_machine_or_a_loaded_torch_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "cuda_device_visible", lambda environ: True)
    monkeypatch.delitem(threads.sys.modules, "torch", raising=False)
    environ: dict[str, str] = {}
    assert not sleep_while_waiting(environ) and environ == {}
    monkeypatch.setattr(threads, "cuda_device_visible", lambda environ: False)
    monkeypatch.setitem(threads.sys.modules, "torch", object())  # OpenMP has read the environment already
    assert not sleep_while_waiting(environ) and environ == {}


def test_cuda_visible_devices_can_hide_every_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads.Path, "glob", lambda self, pattern: iter([self / "nvidia0"]))
    assert threads.cuda_device_visible({})
    assert not threads.cuda_device_visible({"CUDA_VISIBLE_DEVICES": ""})


def test_the_entry_point_sets_it_before_its_pre_check(monkeypatch: pytest.MonkeyPatch, no_torch_yet: None) -> None:
    """cli() sets it first, before the pre-check (which may refuse) and before anything imports torch."""
    from vit_locality import train

    monkeypatch.setenv("OMP_WAIT_POLICY", "set by this test")  # so that teardown restores the session's value
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setattr(threads, "cuda_device_visible", lambda environ: False)
    monkeypatch.setattr(train.sys, "argv", ["train.py", "data=synthetic", "model=vit_tiny", "aug.cutmix=2"])
    with pytest.raises(SystemExit) as refused:
        train.cli()
    assert refused.value.code == 2
    assert threads.os.environ.get("OMP_WAIT_POLICY") == "PASSIVE"
