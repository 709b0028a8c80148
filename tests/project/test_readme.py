"""The documentation stays true for a newcomer: the README's config-group table names every option there is, the
launcher names are the Makefile's and Hydra's, every `make` target and every `python train.py` command the README and
docs/ give exists and passes the pre-check, every exit status the code uses is explained, and every link resolves."""

from __future__ import annotations

import re
import shlex

import pytest
from helpers import CONF, REPO

from vit_locality.errors import VitLocalityError
from vit_locality.precheck.preflight import check_command

README = (REPO / "README.md").read_text()
DOCS = {path.name: path.read_text() for path in sorted((REPO / "docs").glob("*.md"))}
ALL = {"README.md": README, **DOCS}
MAKEFILE = (REPO / "Makefile").read_text()


def _table_row(first_cell: str) -> str:
    rows = [line for line in README.splitlines() if line.startswith(f"| `{first_cell}` |")]
    assert len(rows) == 1, first_cell
    return rows[0]


def _options(row: str) -> set[str]:
    return set(re.findall(r"`([\w/]+)`", row.split("|")[2]))


def test_the_readme_is_a_first_five_minutes_page() -> None:
    """At most 200 lines, the two commands first, the paper's 8-cell command, and a link to every docs page."""
    assert len(README.splitlines()) <= 200
    assert README.index("make demo") < README.index("make test")
    assert "python train.py -m aug.cutmix=true,false aug.autoaug=true,false loss.ls=0,0.1" in README
    linked = set(re.findall(r"\(docs/([\w.]+\.md)[^)]*\)", README))
    assert linked == set(DOCS), set(DOCS) ^ linked


def test_every_config_group_and_option_is_in_the_table() -> None:
    groups = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name not in ("hydra", "__pycache__"))
    for group in groups:
        options = {p.stem for p in (CONF / group).glob("*.yaml") if not p.stem.startswith("_")}
        assert options <= _options(_table_row(group)), group


def test_launcher_names_agree_between_the_docs_the_makefile_and_the_configs() -> None:
    ours = {p.stem for p in (CONF / "hydra" / "launcher").glob("*.yaml")}
    plugins = {"basic", "joblib", "submitit_local"}  # Hydra's own and the installed plugins'
    in_readme = _options(_table_row("hydra/launcher"))
    assert in_readme == ours | plugins
    makefile_comment = re.search(r"^LAUNCHER \?= basic\s+# (.+?) \(", MAKEFILE, re.M).group(1)
    assert set(makefile_comment.split(" | ")) == in_readme


def test_every_make_target_the_docs_name_exists() -> None:
    targets = set(re.findall(r"^([a-z][\w-]*):", MAKEFILE, re.M))
    named = {(name, target) for name, text in ALL.items() for target in re.findall(r"`make ([a-z][\w-]*)", text)}
    assert named and [(name, target) for name, target in sorted(named) if target not in targets] == []


COMMAND = re.compile(r"(?:^|`|\$ )python train\.py ([^`\n#]*)", re.M)
PLACEHOLDER = re.compile(r"<[^>]+>|\.\.\.|\bSEEDS\b|\$\(")


RECORDS = ("demo_design.md",)  # the log of a finished search: its commands ran on configs since replaced


def _documented_commands() -> list[tuple[str, list[str]]]:
    found = []
    for name, text in ALL.items():
        if name in RECORDS:
            continue
        for match in COMMAND.finditer(text):
            line = match.group(1).strip().rstrip("\\").strip()
            if PLACEHOLDER.search(line):
                continue
            try:
                found.append((name, shlex.split(line)))
            except ValueError:
                continue
    return found


COMMANDS = _documented_commands()


def test_the_docs_give_commands_to_check() -> None:
    assert len(COMMANDS) >= 10 and any(name == "README.md" for name, _ in COMMANDS)


@pytest.mark.parametrize(("page", "args"), COMMANDS, ids=[f"{p}:{' '.join(a)[:60]}" for p, a in COMMANDS])
def test_every_documented_training_command_passes_the_pre_check(page: str, args: list[str], tmp_path) -> None:
    """Composed and checked as typed (nothing trains); that this machine lacks a data set (offline: nothing to
    download from) is no fault of the command."""
    args = [a for a in args if a not in ("-h", "--help")]
    if any(a.startswith(("ckpt_path=", "hydra/launcher=slurm")) for a in args):
        pytest.skip("names a file or a cluster this machine does not have")
    problems = check_command([*args, f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/sweep"], CONF)
    offline = [p for p in problems if "cannot be reached" in p or "not in data.root" in p]
    assert [p for p in problems if p not in offline] == [], (page, args)


def test_every_exit_status_is_explained() -> None:
    codes = {0, 1, 2, 3, 130, 140, 143}
    codes |= {cls.exit_code for cls in _error_classes(VitLocalityError)}
    table = DOCS["troubleshooting.md"]
    explained = {int(code) for row in re.findall(r"^\| ([\d /]+) \|", table, re.M) for code in row.split("/")}
    assert codes <= explained, codes - explained


def _error_classes(base: type) -> list[type]:
    import vit_locality.run.cell  # noqa: F401  (imports the project's error classes)

    return [base, *(cls for sub in base.__subclasses__() for cls in _error_classes(sub))]


def test_every_link_between_the_pages_resolves() -> None:
    for name, text in ALL.items():
        here = REPO if name == "README.md" else REPO / "docs"
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (here / target).exists(), (name, target)
