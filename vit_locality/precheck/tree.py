"""The composed config as a tree, printed when a cell starts (`startup.print_config`), so what ran is on screen."""

from __future__ import annotations

from collections.abc import Sequence

from omegaconf import DictConfig, OmegaConf

# Top-level sections in the order a reader looks for them; the others follow in config order.
FIRST = ("data", "model", "aug", "loss", "optim", "trainer", "stats", "callbacks", "logger")


def config_tree_text(cfg: DictConfig, order: Sequence[str] = FIRST, width: int = 100) -> str:
    """Render the resolved config as a rich tree (one branch per section, its YAML as the leaf) into text."""
    from rich.console import Console
    from rich.syntax import Syntax
    from rich.tree import Tree

    tree = Tree("config", style="bold", guide_style="dim")
    sections = [key for key in order if key in cfg] + [key for key in cfg if key not in order and key != "hydra"]
    for key in sections:
        value = cfg[key]
        text = OmegaConf.to_yaml(value, resolve=True) if isinstance(value, DictConfig) else f"{value}\n"
        tree.add(f"[bold]{key}[/bold]").add(
            Syntax(text.rstrip("\n"), "yaml", theme="ansi_dark", background_color="default")
        )
    console = Console(width=width, record=True, force_terminal=False, color_system=None)
    with console.capture() as captured:
        console.print(tree)
    return captured.get()
