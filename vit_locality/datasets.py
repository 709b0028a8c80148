"""What a data set declares: a DatasetSpec constant in its own module (`data.module`; the built-ins' under
vit_locality/data/), read from the module's source, so the pre-check reads it without importing the module or torch."""

from __future__ import annotations

import ast
import functools
import importlib.util
from dataclasses import dataclass, replace
from importlib import import_module
from pathlib import Path
from typing import Any

from vit_locality.errors import ConfigError, first_line

# The modules that declare the built-in data sets, in the order the catalog lists them; a record of the previous
# release (no data.module) finds its data set here.
BUILT_IN_MODULES = (
    "vit_locality.data.cifar",
    "vit_locality.data.tiny_imagenet",
    "vit_locality.data.synthetic",
    "vit_locality.data.glyphs",
)


@dataclass(frozen=True)
class Archive:
    """One official archive: the folder its files are read from, the file that unpacks into it, where it comes from,
    and (when known) the size and md5 a download must match."""

    folder: str  # under the data root, created by extracting the archive
    filename: str  # under the data root
    url: str
    size: int | None = None
    md5: str | None = None


@dataclass(frozen=True)
class DatasetSpec:
    """One data set's declaration, written with literal values (it is read without running its module). `archives`
    None: a generated set; `train_images`, `num_classes`, `image_size` None: the config's own."""

    name: str
    default_policy: str  # what aug.policy=auto means on it (catalog.AUGMENT_POLICIES)
    config: str  # "module:Class": the pydantic section class that validates `data.*`
    datamodule: str  # the LightningDataModule class, in the declaring module
    archives: tuple[Archive, ...] | None = None
    train_images: int | None = None
    num_classes: int | None = None
    image_size: int | None = None
    module: str = ""  # the declaring module, filled in by `declared_in`

    def config_class(self) -> Any:
        """The section class that validates this data set's `data.*`."""
        module, _, name = self.config.partition(":")
        return getattr(import_module(module), name)

    def datamodule_class(self) -> Any:
        """The datamodule class a run builds (imports its module, and torch)."""
        return getattr(import_module(self.module), self.datamodule)

    def archive(self) -> Archive:
        """The one archive the data check and the download read; a ConfigError, never a skip, when none is declared."""
        if not self.archives:
            raise ConfigError(
                f"data set {self.name}: its declaration (DatasetSpec) lists no archive, yet its config downloads "
                "(data.download): declare `archives` with folder, filename and url, or make it a generated set"
            )
        return self.archives[0]


_CALLS = {"DatasetSpec": DatasetSpec, "Archive": Archive}


def _value(node: ast.expr) -> Any:
    """A declaration's value: a literal, a tuple, or a DatasetSpec or Archive call of them."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
        keywords = {str(keyword.arg): _value(keyword.value) for keyword in node.keywords}
        return _CALLS[node.func.id](*map(_value, node.args), **keywords)
    if isinstance(node, ast.Tuple):
        return tuple(map(_value, node.elts))
    return ast.literal_eval(node)


@functools.lru_cache(maxsize=64)
def declared_in(module: str) -> tuple[DatasetSpec, ...]:
    """The DatasetSpecs `module` assigns at its top level, read from its source; a one-line ConfigError when the
    module cannot be found or a declaration is not literal."""
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None or not found.origin or not found.origin.endswith(".py"):
        raise ConfigError(
            f"data.module={module!r} is not allowed: no such Python module on the path (sys.path, PYTHONPATH)"
        )
    specs = []
    for node in ast.parse(Path(found.origin).read_text(encoding="utf-8")).body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "DatasetSpec":
            try:
                specs.append(replace(_value(value), module=module))
            except (ValueError, TypeError, SyntaxError) as error:
                raise ConfigError(
                    f"{found.origin}, line {node.lineno}: a DatasetSpec is read without running its module, so it "
                    f"is written with literal values ({first_line(error)})"
                ) from None
    return tuple(specs)


def built_in() -> dict[str, DatasetSpec]:
    """The built-in data sets by name, in catalog order."""
    return {spec.name: spec for module in BUILT_IN_MODULES for spec in declared_in(module)}


def declared(module: str | None) -> dict[str, DatasetSpec]:
    """The data sets a data section's `module` may name: its own declarations, or (None, a built-in module) every
    built-in one."""
    if module is None or module in BUILT_IN_MODULES:
        return built_in()
    return {spec.name: spec for spec in declared_in(module)}


def spec_of(name: str, module: str | None = None) -> DatasetSpec:
    """The declaration of data set `name` in `module` (None: the built-in modules); a one-line ConfigError naming
    the declared ones when there is none."""
    known = declared(module)
    if name not in known:
        where = "" if module is None or module in BUILT_IN_MODULES else f" in data.module={module}"
        raise ConfigError(
            f"data set {name!r} declares nothing (no DatasetSpec){where}: known data sets are "
            f"{', '.join(known) or 'none'}"
        )
    return known[name]
