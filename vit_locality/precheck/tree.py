"""The composed config as a tree, printed once per command (`startup.print_config`), so what ran is on screen: a
single run's config as its cell starts, a sweep's before its first cell (sweep_tree_text), never once per cell."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import yaml
from omegaconf import DictConfig, OmegaConf

# Top-level sections in the order a reader looks for them; the others follow in config order.
FIRST = ("data", "model", "aug", "loss", "optim", "trainer", "stats", "callbacks", "logger")
# Left out of a sweep's tree: Hydra's section, and the run name, which is each cell's own (its directory).
PER_CELL = ("hydra", "run_name")
SWEPT_MARK = "  # swept"
ABSENT_SHOWN = "(absent)"
_ABSENT = object()


class Swept(NamedTuple):
    """A setting the cells of a sweep do not share: its distinct values, in the order the cells give them."""

    values: tuple[Any, ...]


def config_tree_text(cfg: DictConfig, order: Sequence[str] = FIRST, width: int = 100) -> str:
    """Render the resolved config as a rich tree (one branch per section, its YAML as the leaf) into text."""
    sections = [key for key in _ordered(cfg, order) if key != "hydra"]
    branches = []
    for key in sections:
        value = cfg[key]
        text = OmegaConf.to_yaml(value, resolve=True) if isinstance(value, DictConfig) else f"{value}\n"
        branches.append((str(key), text))
    return _render("config", branches, width)


def sweep_tree_text(configs: Sequence[Mapping[str, Any]], title: str, width: int = 100) -> str:
    """One tree for the cells of a sweep (their resolved configs as plain data): what they share as in a single
    run's tree, and each setting they do not share once, with its values in the cells' order, as
    `cutmix: true, false  # swept` (`(absent)` for a cell without the key; a mapping that is null in some cells is
    listed whole). The run name, each cell's own, is left out: Hydra's line for each cell names its overrides."""
    shared = merged_config(configs)
    branches = []
    for key in (key for key in _ordered(shared, FIRST) if key not in PER_CELL):
        value = shared[key]
        text = _section_yaml(value) if isinstance(value, dict) else f"{_swept_text(value)}\n"
        branches.append((str(key), text))
    return _render(title, branches, width)


def merged_config(configs: Sequence[Any]) -> Any:
    """Several configs as one: a mapping that every config has, key by key; a value they all share, as it is; any
    other value, `Swept` with the distinct values."""
    if configs and all(isinstance(config, Mapping) for config in configs):
        keys = dict.fromkeys(key for config in configs for key in config)
        return {key: merged_config([config.get(key, _ABSENT) for config in configs]) for key in keys}
    distinct = {_flow(value): value for value in configs}  # first value of each spelling, in the cells' order
    return next(iter(distinct.values())) if len(distinct) == 1 else Swept(tuple(distinct.values()))


def _ordered(cfg: Iterable[Any], order: Sequence[str]) -> list[Any]:
    keys = list(cfg)
    return [key for key in order if key in keys] + [key for key in keys if key not in order]


def _flow(value: Any) -> str:
    """One value in one line of YAML (`true`, `null`, `[0.02, 0.33]`, `{a: 1}`)."""
    if value is _ABSENT:
        return ABSENT_SHOWN
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).removesuffix("\n...\n").strip()


def _swept_text(value: Any) -> str:
    if isinstance(value, Swept):
        return ", ".join(_flow(item) for item in value.values) + SWEPT_MARK
    return f"{value}"


def _section_yaml(section: dict[str, Any]) -> str:
    """A merged section as YAML, each swept setting on its key's line with its values."""
    swept: dict[str, str] = {}

    def placeholders(node: Any) -> Any:
        if isinstance(node, dict):
            return {key: placeholders(item) for key, item in node.items()}
        if isinstance(node, Swept):
            token = f"SWEPTVALUES{len(swept)}X"
            swept[token] = _swept_text(node)
            return token
        return node

    text = OmegaConf.to_yaml(OmegaConf.create(placeholders(section)))
    for token, shown in swept.items():
        text = text.replace(token, shown)
    return text


def _render(title: str, branches: Iterable[tuple[str, str]], width: int) -> str:
    """A rich tree, one branch per (section, its text as YAML), as plain text."""
    from rich.console import Console
    from rich.syntax import Syntax
    from rich.tree import Tree

    tree = Tree(title, style="bold", guide_style="dim")
    for key, text in branches:
        tree.add(f"[bold]{key}[/bold]").add(
            Syntax(text.rstrip("\n"), "yaml", theme="ansi_dark", background_color="default")
        )
    console = Console(width=width, record=True, force_terminal=False, color_system=None)
    with console.capture() as captured:
        console.print(tree)
    return captured.get()
