"""Load the official CIFAR pickles without letting a pickle run code, make numpy trust it, or allocate without bound:
`find_class` hands out checked stand-ins for the few globals a CIFAR file names, what they make is charged to a
budget, and the file (size-capped) is unpickled in memory by the pure-Python unpickler."""

from __future__ import annotations

import io
import math
import os
import pickle
import re
import reprlib
import struct
from pathlib import Path
from typing import IO, Any, NoReturn

import numpy as np

from vit_locality.data.base import DataError
from vit_locality.errors import first_line
from vit_locality.upstream import python_unpickler_class

# The largest official file is 155 MB, and unpickling it makes ~310 MB (the array and the bytes it is rebuilt from).
MAX_PICKLE_FILE_BYTES = 512 << 20
MAX_UNPICKLED_BYTES = 1 << 30
_NUMBER_TYPE_CODE = re.compile(r"[biufc][0-9]{1,2}")  # bool, signed, unsigned, float, complex, with item size
_LATIN1 = ("latin1", "latin-1", "iso-8859-1")
# What unpickling a truncated or corrupted file raises (RuntimeError: RecursionError, for nesting too deep).
_CORRUPT = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError)
_CORRUPT += (struct.error, MemoryError, OverflowError, RuntimeError)


class _DType:
    """numpy's `dtype` as unpickled here: a plain number type code and its byte order, nothing else."""

    def __init__(self, unpickler: RestrictedUnpickler, code: Any, *flags: Any) -> None:
        if not (isinstance(code, str) and _NUMBER_TYPE_CODE.fullmatch(code)):
            unpickler.refuse(f"the dtype {reprlib.repr(code)}", "data files hold arrays of plain numbers only")
        self.dtype = np.dtype(code)

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) > 1 and state[1] in ("<", ">"):
            self.dtype = self.dtype.newbyteorder(state[1])


class _Array:
    """numpy's `_reconstruct(ndarray, ...)`: a checked state made into an array by `np.frombuffer`."""

    def __init__(self, unpickler: RestrictedUnpickler) -> None:
        self.unpickler = unpickler
        self.array: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        refuse = self.unpickler.refuse
        if not (isinstance(state, tuple) and len(state) in (4, 5)):
            refuse("a numpy array state", "it is not the (shape, dtype, order, data) numpy writes")
        shape, dtype, fortran, data = state[-4:]
        ints = isinstance(shape, tuple) and all(type(n) is int and n >= 0 for n in shape)
        if not ints or not isinstance(dtype, _DType):
            refuse("a numpy array state", "its shape or dtype is not one numpy writes for an array of numbers")
        what = f"a numpy array of shape {reprlib.repr(shape)} and dtype {dtype.dtype!r}"
        if isinstance(data, str):  # Python 2's str, read as latin-1
            self.unpickler.charge(what, len(data))
            data = data.encode("latin1")
        if not isinstance(data, bytes):
            refuse(what, "its data is not bytes")
        self.unpickler.charge(what, math.prod(shape) * dtype.dtype.itemsize)  # reshape refuses another length
        order = "F" if fortran else "C"
        self.array = np.frombuffer(data, dtype=dtype.dtype).reshape(shape, order=order).copy(order=order)


def _ndarray(*args: Any) -> NoReturn:
    """numpy.ndarray as unpickled here: only the first argument of `_reconstruct`, never called."""
    raise pickle.UnpicklingError("a direct call to numpy.ndarray, which no data file makes")


class RestrictedUnpickler(python_unpickler_class()):
    """Unpickler whose `find_class` hands out only the stand-ins; `file` should be in memory (io.BytesIO)."""

    def __init__(self, file: IO[bytes], source: str) -> None:
        super().__init__(file, encoding="latin1")
        self.source = source
        self.unpickled_bytes = 0
        self.allowed = {
            ("numpy.core.multiarray", "_reconstruct"): self._reconstruct,  # numpy 1's name, and the official files'
            ("numpy._core.multiarray", "_reconstruct"): self._reconstruct,
            ("numpy", "ndarray"): _ndarray,
            ("numpy", "dtype"): lambda *args: _DType(self, *args),
            ("_codecs", "encode"): self._encode,
            ("builtins", "bytes"): self._empty_bytes,
            ("__builtin__", "bytes"): self._empty_bytes,
        }

    def refuse(self, what: str, reason: str) -> NoReturn:
        raise DataError(
            f"{self.source}: refusing to unpickle {what}: {reason}; the file is not an official one, delete it "
            "and download it again"
        )

    def charge(self, what: str, nbytes: int) -> None:
        """Count `nbytes` about to be made against the budget; refuse `what` if they do not fit."""
        self.unpickled_bytes += nbytes
        if self.unpickled_bytes > MAX_UNPICKLED_BYTES:
            self.refuse(
                what,
                f"it asks for {nbytes} bytes, past the limit of {MAX_UNPICKLED_BYTES} bytes per data file (an "
                "official file needs at most ~310 MB)",
            )

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.allowed:
            self.refuse(f"the global {module}.{name}", "a data file should hold only arrays and lists")
        return self.allowed[module, name]

    def _reconstruct(self, cls: Any, *args: Any) -> _Array:
        if cls is not _ndarray:
            self.refuse(f"the call _reconstruct({reprlib.repr(cls)}, ...)", "data files rebuild only numpy arrays")
        return _Array(self)

    def _encode(self, text: Any, encoding: Any = "utf-8", *rest: Any) -> bytes:
        if not isinstance(text, str) or encoding not in _LATIN1 or rest:
            self.refuse("the call _codecs.encode(...)", "data files encode only text as latin-1")
        self.charge("the call _codecs.encode(...)", len(text))
        return text.encode("latin1")

    def made(self, value: Any) -> Any:
        """`value`, or the array a stand-in made."""
        if not isinstance(value, _Array):
            return value
        if value.array is None:
            self.refuse("a numpy array", "it was never given its contents")
        return value.array

    def _empty_bytes(self, *args: Any) -> bytes:
        if args:
            self.refuse("the call bytes(...)", "data files call bytes() only for an empty one")
        return b""


def _read_capped(path: Path, hint: str) -> bytes:
    """The whole file, refused over MAX_PICKLE_FILE_BYTES (reads the reported size + 1: `read(n)` allocates n)."""
    limit = MAX_PICKLE_FILE_BYTES
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        data = handle.read(size + 1) if size <= limit else b""
    if size > limit or len(data) > limit:
        raise DataError(
            f"{path}: over the limit of {limit} bytes for a data file (the largest official one is 155 MB); "
            f"the file is not an official one: {hint}"
        )
    return data


def load_pickle(path: str | Path, hint: str = "delete it and re-run to download it again") -> Any:
    """Unpickle `path` with RestrictedUnpickler; a truncated or corrupted file becomes a DataError."""
    path = Path(path)
    try:
        unpickler = RestrictedUnpickler(io.BytesIO(_read_capped(path, hint)), str(path))
        loaded = unpickler.load()  # stand-ins in it, or in a dict's values, become their arrays
        return {k: unpickler.made(v) for k, v in loaded.items()} if isinstance(loaded, dict) else unpickler.made(loaded)
    except DataError:
        raise
    except FileNotFoundError:
        raise DataError(f"{path}: file is missing; {hint}") from None
    except _CORRUPT as err:
        raise DataError(
            f"{path}: not a readable pickle ({first_line(err)}); the file is truncated or corrupted: {hint}"
        ) from None
