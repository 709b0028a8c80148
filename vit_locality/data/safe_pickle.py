"""Load the official CIFAR pickles without letting a pickle run code.

A plain `pickle.load` calls whatever global a file names (`os.system`, for one), so a tampered download
or a file from an untrusted mirror could execute anything. The official CIFAR files only need numpy's array
reconstruction, `_codecs.encode` (how Python 3 pickles bytes under protocol 2) and builtin data types;
anything else is refused before it is called.
"""

from __future__ import annotations

import pickle
import struct
from pathlib import Path
from typing import IO, Any

from vit_locality.data.base import DataError

# Python 2 pickles (the official files) say `__builtin__`, `long`, `unicode`; Unpickler maps them.
_DATA_TYPES = ("bool", "int", "long", "float", "complex", "str", "unicode", "bytes", "bytearray")
_CONTAINERS = ("list", "tuple", "dict", "set", "frozenset")
ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        *(
            (module, name)
            for module in ("numpy.core.multiarray", "numpy._core.multiarray")
            for name in ("_reconstruct", "scalar")
        ),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
        *((module, name) for module in ("builtins", "__builtin__") for name in _DATA_TYPES + _CONTAINERS),
    }
)


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler whose `find_class` only hands out the globals in ALLOWED_GLOBALS."""

    def __init__(self, file: IO[bytes], source: str) -> None:
        super().__init__(file, encoding="latin1")
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            raise DataError(
                f"{self.source}: refusing to unpickle the global {module}.{name}: a data file should hold "
                "only arrays and lists; the file is not an official one, delete it and download it again"
            )
        return super().find_class(module, name)


def load_pickle(path: str | Path, hint: str = "delete it and re-run to download it again") -> Any:
    """Unpickle `path` with RestrictedUnpickler; a truncated or corrupted file becomes a DataError."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            return RestrictedUnpickler(handle, str(path)).load()
    except DataError:
        raise
    except FileNotFoundError:
        raise DataError(f"{path}: file is missing; {hint}") from None
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
        UnicodeDecodeError,
        struct.error,
        MemoryError,
        RecursionError,
    ) as err:
        message = " ".join(str(err).split())
        raise DataError(
            f"{path}: not a readable pickle ({type(err).__name__}: {message}); the file is truncated or "
            f"corrupted: {hint}"
        ) from None
