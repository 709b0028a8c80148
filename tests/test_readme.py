"""The README stays true for a newcomer: its config-group table names every option there is, its launcher names are
the Makefile's and Hydra's, and it explains every exit status train.py uses."""

from __future__ import annotations

import re

from helpers import CONF, REPO

README = (REPO / "README.md").read_text()
MAKEFILE = (REPO / "Makefile").read_text()


def _table_row(first_cell: str) -> str:
    rows = [line for line in README.splitlines() if line.startswith(f"| `{first_cell}` |")]
    assert len(rows) == 1, first_cell
    return rows[0]


def _options(row: str) -> set[str]:
    return set(re.findall(r"`([\w/]+)`", row.split("|")[2]))


def test_every_config_group_and_option_is_in_the_table() -> None:
    groups = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name not in ("hydra", "__pycache__"))
    for group in groups:
        options = {p.stem for p in (CONF / group).glob("*.yaml") if not p.stem.startswith("_")}
        assert options <= _options(_table_row(group)), group


def test_launcher_names_agree_between_readme_makefile_and_configs() -> None:
    ours = {p.stem for p in (CONF / "hydra" / "launcher").glob("*.yaml")}
    plugins = {"basic", "joblib", "submitit_local"}  # Hydra's own and the installed plugins'
    in_readme = _options(_table_row("hydra/launcher"))
    assert in_readme == ours | plugins
    makefile_comment = re.search(r"^LAUNCHER \?= basic\s+# (.+?) \(", MAKEFILE, re.M).group(1)
    assert set(makefile_comment.split(" | ")) == in_readme
    variables = re.search(r"`LAUNCHER` \(([^)]*)\)", README).group(1)
    assert set(re.findall(r"`(\w+)`", variables)) == in_readme


def test_the_two_setup_commands_come_first_and_exit_statuses_are_explained() -> None:
    setup = README[README.index("## Set up") :]
    assert setup.index("make demo") < setup.index("make test") < setup.index("##", 3)
    statuses = re.findall(r"^\| (\d+(?: / \d+)?) \|", README, re.M)
    assert statuses[:5] == ["0", "1", "2", "3", "130 / 143"]
    assert "-sc install=bash" in README  # tab completion
    assert "--index-url https://download.pytorch.org/whl/" in README  # a CUDA build of torch before the package


def test_the_troubleshooting_rows_of_a_data_set_name_both_ways_out() -> None:
    """An md5 mismatch: fetch the file again, or keep a copy one trusts with data.verify=false and what it still
    checks; a server that cannot be reached is refused before anything is made."""
    rows = [line for line in README.splitlines() if line.startswith("| `") and "md5" in line.split("|")[1]]
    assert len(rows) == 1, rows
    what_to_do = rows[0].split("|")[2]
    assert "delete it and run again" in what_to_do and "`data.verify=false`" in what_to_do
    assert "still checked member by member" in what_to_do and "format, shape and labels" in what_to_do
    lines = README.splitlines()
    assert any("cannot be reached to download it" in line and "nothing was created" in line for line in lines)


def test_the_set_up_gives_the_cpu_only_torch_line_beside_the_gpu_one() -> None:
    setup = README.split("## Set up and check")[1].split("\n## ")[0]
    assert "--index-url https://download.pytorch.org/whl/cu124" in setup
    assert "make install TORCH_INDEX=https://download.pytorch.org/whl/cpu" in setup
    assert "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu" in setup
