"""Load the official CIFAR pickles without letting a pickle run code, crash numpy or allocate without bound.

A plain `pickle.load` calls whatever global a file names (`os.system`, for one), so a tampered download
or a file from an untrusted mirror could execute anything. The official CIFAR files only need numpy's array
reconstruction, `_codecs.encode` (how Python 3 pickles bytes under protocol 2) and builtin data types;
anything else is refused before it is called.

The allowed globals are not harmless on their own either:
- numpy trusts the states it unpickles: a dtype state can add object fields to a plain void type, so that raw
  bytes from the file are used as object pointers, and an object array whose list is shorter than its shape
  reads past the list; both crash the process (numpy 2.4). A data file holds arrays of numbers, so every
  dtype an array, scalar or dtype state uses must be a plain number type, as numpy writes it.
- calls can ask for memory out of all proportion to the file: `bytes(10**12)`, numpy's
  `_reconstruct(ndarray, (10**12,), 'O')`, or an array state claiming 10^12 items. Every call and every
  array is charged to a budget of MAX_UNPICKLED_BYTES per file, and the one that would overrun it is refused
  before it runs.
The file itself is read whole, at most MAX_PICKLE_FILE_BYTES of it, and unpickled by Python's pure-Python
unpickler (`pickle._Unpickler`): the C one allocates what a length field claims before reading (a 14-byte file
claiming a 1 TB string) and grows its memo to twice the largest index a file names (one LONG_BINPUT 2^31 costs
32 GB), where the pure-Python one reads from memory and keeps its memo in a dict. That costs under a second
more per 155 MB file, once per run.
"""

from __future__ import annotations

import io
import operator
import os
import pickle
import reprlib
import struct
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, NoReturn

import numpy as np

from vit_locality.data.base import DataError
from vit_locality.errors import first_line
from vit_locality.upstream import python_unpickler_class

# The largest official file, CIFAR-100's train batch, is 155 MB; its 50000 x 3072 uint8 array is 154 MB and,
# re-pickled by Python 3, costs as much again as the `_codecs.encode` bytes it is rebuilt from (~310 MB).
MAX_PICKLE_FILE_BYTES = 512 << 20
MAX_UNPICKLED_BYTES = 1 << 30
# Text codecs and reprs write at most 10 bytes per character ('\U0001f600'), a list of a str's characters
# about 80 bytes per item: a call to a builtin type is charged this much per byte or item of its arguments.
BUILTIN_CALL_GROWTH = 100

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
_LATIN1 = ("latin1", "latin-1", "iso-8859-1")
_NUMBER_KINDS = "biufc"  # bool, signed, unsigned, float, complex
# A number dtype's state as numpy writes it: (3, byte order, then these: subarray, names, fields, item size,
# alignment, flags); any other tail describes fields, objects or sizes a number type does not have.
_NUMBER_DTYPE_STATE_TAIL = (None, None, None, -1, -1, 0)


class _Refused(Exception):
    """Why RestrictedUnpickler refuses what it was about to do; it becomes a DataError naming the file."""


def _item_count(value: Any) -> int:
    """Bytes or items in `value` and everything it holds: what a copy, repr or list of it grows with."""
    if isinstance(value, (str, bytes, bytearray)):
        return len(value)
    if isinstance(value, np.ndarray):
        return max(value.size, value.nbytes)
    if isinstance(value, dict):
        return len(value) + sum(_item_count(key) + _item_count(item) for key, item in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return len(value) + sum(map(_item_count, value))
    return 1


def _number_dtype(spec: Any) -> np.dtype:
    """`np.dtype(spec)`, refused unless it is a plain number type (no fields, sub-arrays or objects)."""
    dtype = np.dtype(spec)
    if dtype.kind not in _NUMBER_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise _Refused(f"dtype {dtype} is not a plain number type, and data files hold arrays of numbers only")
    return dtype


def _array_bytes(shape: Any, dtype: Any) -> int:
    """What numpy allocates for an array of `shape` and number `dtype`, computed without allocating it."""
    count = 1
    for extent in shape if isinstance(shape, (tuple, list)) else (shape,):
        count *= abs(operator.index(extent))
    return count * _number_dtype(dtype).itemsize


def _builtin_call_bytes(args: tuple) -> int:
    """`bytes(n)` and `bytearray(n)` allocate n bytes; other arguments grow by BUILTIN_CALL_GROWTH at most."""
    return sum(
        abs(operator.index(arg)) if isinstance(arg, (int, np.integer)) else BUILTIN_CALL_GROWTH * _item_count(arg)
        for arg in args
    )


def _encode_bytes(args: tuple) -> int:
    """`_codecs.encode(text, 'latin1')` is how Python 3 writes bytes under protocol 2: one byte per character.

    No pickler writes other codecs, which grow text up to tenfold (unicode_escape): they are charged like a
    call to a builtin type.
    """
    text, encoding = (*args, "utf-8")[:2]
    return _item_count(text) if encoding in _LATIN1 else _builtin_call_bytes(args)


def _scalar_bytes(args: tuple) -> int:
    """numpy's `scalar(dtype, data)` copies one item of a number dtype out of `data`."""
    _number_dtype(args[0])
    return _item_count(args)


# What each allowed callable may allocate, from its arguments; builtin types fall back to _builtin_call_bytes.
_CALL_BYTES: dict[str, Callable[[tuple], int]] = {
    "_reconstruct": lambda args: _array_bytes(args[1], args[2]),  # (ndarray, shape, typecode)
    "ndarray": lambda args: _array_bytes(args[0], args[1] if len(args) > 1 else float),
    "scalar": _scalar_bytes,
    "dtype": _item_count,
    "encode": _encode_bytes,
}


def _array_state_bytes(state: Any) -> int:
    """Bytes ndarray's `__setstate__` allocates for `state`: ([version,] shape, dtype, is_fortran, data).

    numpy refuses any other form of state before it allocates.
    """
    if isinstance(state, tuple) and len(state) in (4, 5):
        return _array_bytes(state[-4], state[-3])
    return 0


def _array_state_name(state: tuple) -> str:
    """An array state refused by _array_state_bytes, by shape and dtype: not by its data, whose repr for a
    155 MB array takes seconds and 620 MB."""
    return f"a numpy array of shape {reprlib.repr(state[-4])} and dtype {reprlib.repr(state[-3])}"


def _dtype_state_bytes(dtype: np.dtype, state: Any) -> int:
    """A dtype state allocates nothing, but numpy trusts it: refuse it unless it is the state numpy writes for a
    plain number type."""
    _number_dtype(dtype)
    plain = isinstance(state, tuple) and len(state) == 8 and state[0] == 3 and state[1] in ("<", ">", "|", "=")
    if not (plain and state[2:] == _NUMBER_DTYPE_STATE_TAIL):
        raise _Refused("it gives a number dtype fields, objects or another size, which numpy then trusts")
    return 0


class RestrictedUnpickler(python_unpickler_class()):
    """Unpickler whose `find_class` only hands out the globals in ALLOWED_GLOBALS, and which checks every call
    (REDUCE, NEWOBJ, INST, OBJ) and every array or dtype state (BUILD) before running it: its dtypes must be
    number types, and what it allocates is charged to a budget of MAX_UNPICKLED_BYTES.

    `file` should be in memory (io.BytesIO): a length field then yields at most what the file holds.
    """

    dispatch = dict(python_unpickler_class().dispatch)

    def __init__(self, file: IO[bytes], source: str) -> None:
        super().__init__(file, encoding="latin1")
        self.source = source
        self.unpickled_bytes = 0
        self._call_rules: dict[Any, tuple[str, Callable[[tuple], int]]] = {}

    def _refuse(self, what: str, reason: str) -> NoReturn:
        raise DataError(
            f"{self.source}: refusing to unpickle {what}: {reason}; the file is not an official one, delete it "
            "and download it again"
        )

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED_GLOBALS:
            self._refuse(f"the global {module}.{name}", "a data file should hold only arrays and lists")
        found = super().find_class(module, name)
        self._call_rules[found] = (f"{module}.{name}", _CALL_BYTES.get(name, _builtin_call_bytes))
        return found

    def _charge(self, what: Callable[[], str], measure: Callable[[], int]) -> None:
        """Add what `measure` says an object allocates to the budget, refusing the object (named by `what`, called
        only then) if `measure` refuses it or it does not fit."""
        try:
            nbytes = measure()
        except _Refused as refused:
            self._refuse(what(), str(refused))
        self.unpickled_bytes += nbytes
        if self.unpickled_bytes > MAX_UNPICKLED_BYTES:
            self._refuse(
                what(),
                f"it asks for {nbytes} bytes, past the limit of {MAX_UNPICKLED_BYTES} bytes per data file (an "
                "official file needs at most ~310 MB)",
            )

    def _charge_call(self, func: Any, args: Any) -> None:
        name, call_bytes = self._call_rules.get(func, (repr(func), None))
        if call_bytes is None or not isinstance(args, tuple):
            raise pickle.UnpicklingError(f"a call to {name} that no data file makes")
        self._charge(lambda: f"the call {name}(...)", lambda: call_bytes(args))

    def load_reduce(self) -> None:
        self._charge_call(self.stack[-2], self.stack[-1])
        super().load_reduce()

    def load_newobj(self) -> None:
        self._charge_call(self.stack[-2], self.stack[-1])
        super().load_newobj()

    def load_newobj_ex(self) -> None:
        if self.stack[-1]:
            raise pickle.UnpicklingError("keyword arguments to a constructor, which no data file uses")
        self._charge_call(self.stack[-3], self.stack[-2])
        super().load_newobj_ex()

    def _instantiate(self, klass: Any, args: list) -> None:
        self._charge_call(klass, tuple(args))
        super()._instantiate(klass, args)

    def load_build(self) -> None:
        instance, state = self.stack[-2], self.stack[-1]
        if isinstance(instance, np.ndarray):
            self._charge(lambda: _array_state_name(state), lambda: _array_state_bytes(state))
        elif isinstance(instance, np.dtype):
            self._charge(lambda: f"the state of dtype {instance}", lambda: _dtype_state_bytes(instance, state))
        super().load_build()

    dispatch[pickle.REDUCE[0]] = load_reduce
    dispatch[pickle.NEWOBJ[0]] = load_newobj
    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex
    dispatch[pickle.BUILD[0]] = load_build


def _read_capped(path: Path, hint: str) -> bytes:
    """The whole file, refused when it is over MAX_PICKLE_FILE_BYTES.

    The read asks for the size the file reports plus one byte, no more: `read(n)` allocates n bytes up front,
    so a read capped at the limit alone would take 512 MB for every file.
    """
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
        return RestrictedUnpickler(io.BytesIO(_read_capped(path, hint)), str(path)).load()
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
        OverflowError,
        RuntimeError,  # numpy, for some malformed scalar states; RecursionError, for nesting too deep
    ) as err:
        raise DataError(
            f"{path}: not a readable pickle ({first_line(err)}); the file is truncated or corrupted: {hint}"
        ) from None
