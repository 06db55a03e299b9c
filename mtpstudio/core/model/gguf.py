"""Header-only GGUF reading (metadata and the tensor table, never tensor data) and ModelInfo."""

from __future__ import annotations

import array
import contextlib
import mmap
import os
import re
import stat
import struct
import sys
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeAlias, TypeVar, overload

if TYPE_CHECKING:  # numpy loads only where a large array needs it (not on the launch path)
    import numpy as np
    import numpy.typing as npt

    _Offsets: TypeAlias = npt.NDArray[np.int64] | array.array[int]

from mtpstudio.core.errors import GgufError
from mtpstudio.core.model.ggml_types import (
    FILE_TYPES,
    TENSOR_TYPES,
    GGUFValueType,
    tensor_bytes,
)
from mtpstudio.core.model.info import ModelInfo, TensorInfo
from mtpstudio.core.outside_text import has_control, visible

__all__ = [
    "DEFAULT_LAZY_THRESHOLD",
    "GgufFile",
    "GgufFormatError",
    "GgufHeaderIncomplete",
    "HeaderBytes",
    "LazyArray",
    "LazyNumberArray",
    "LazyStringArray",
    "MetaValue",
    "model_info_from_gguf",
    "read_gguf",
    "read_gguf_bytes",
    "read_model_info",
    "split_part_paths",
]

#: Arrays with more elements than this are kept lazy (``LazyStringArray``/``LazyNumberArray``).
DEFAULT_LAZY_THRESHOLD: Final = 256

_SUPPORTED_VERSIONS: Final = (2, 3)
_MAX_DIMS: Final = 4  # GGML_MAX_DIMS
_MAX_NESTING: Final = 8  # nested metadata arrays deeper than this are rejected
_MAX_LAYERS: Final = 1 << 16  # a block_count above this is treated as absurd
_PLAIN_SCAN_MAX: Final = 1_000_000  # string arrays walked without numpy (see scan_strings)
_SCAN_WINDOW: Final = 1 << 17  # bytes per numpy window when skipping string arrays

_INT64_MAX: Final = (1 << 63) - 1
_MIN_KV_BYTES: Final = 8 + 4 + 1  # key length, value type, smallest value
_MIN_TENSOR_INFO_BYTES: Final = 8 + 4 + 4 + 8  # name length, n_dims, type, offset
_FORMAT_HINT: Final = (
    "The file is damaged, truncated inside its header, or not a GGUF model; "
    "re-download or re-convert it."
)

_T = TypeVar("_T")


def _walk_plainly(count: int) -> bool:
    """Whether an array of ``count`` strings is walked by the plain loop (numpy not loaded
    and not worth loading for it) rather than numpy's windows (see ``scan_strings``)."""
    return count <= _PLAIN_SCAN_MAX and "numpy" not in sys.modules


# value type id -> (struct format char, size in bytes, numpy dtype char, short name)
_SCALARS: Final[dict[int, tuple[str, int, str, str]]] = {
    GGUFValueType.UINT8: ("B", 1, "u1", "u8"),
    GGUFValueType.INT8: ("b", 1, "i1", "i8"),
    GGUFValueType.UINT16: ("H", 2, "u2", "u16"),
    GGUFValueType.INT16: ("h", 2, "i2", "i16"),
    GGUFValueType.UINT32: ("I", 4, "u4", "u32"),
    GGUFValueType.INT32: ("i", 4, "i4", "i32"),
    GGUFValueType.FLOAT32: ("f", 4, "f4", "f32"),
    GGUFValueType.BOOL: ("?", 1, "u1", "bool"),
    GGUFValueType.UINT64: ("Q", 8, "u8", "u64"),
    GGUFValueType.INT64: ("q", 8, "i8", "i64"),
    GGUFValueType.FLOAT64: ("d", 8, "f8", "f64"),
}
_TYPE_NAMES: Final[dict[int, str]] = {
    **{t: spec[3] for t, spec in _SCALARS.items()},
    GGUFValueType.STRING: "string",
    GGUFValueType.ARRAY: "array",
}
# Smallest encoding of one array element of each type (strings: the u64 length; arrays: type+count).
_MIN_ELEMENT_BYTES: Final[dict[int, int]] = {
    **{t: spec[1] for t, spec in _SCALARS.items()},
    GGUFValueType.STRING: 8,
    GGUFValueType.ARRAY: 12,
}

_SPLIT_RE: Final = re.compile(r"^(?P<prefix>.*)-(?P<no>\d+)-of-(?P<count>\d+)\.gguf$")

# Architectures whose trunk layers alternate recurrent (gated DeltaNet) and full attention.
_INTERVAL_HYBRID_ARCHS: Final = frozenset({"qwen35", "qwen35moe", "qwen3next"})
# Architectures in which every layer is recurrent.
_RECURRENT_ARCHS: Final = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
_DEFAULT_FULL_ATTENTION_INTERVAL: Final = 4  # llama.cpp's default for the hybrid archs


class GgufFormatError(GgufError):
    """A GGUF header is malformed; ``offset`` is the byte offset where the problem was found."""

    def __init__(self, message: str, *, path: str, offset: int) -> None:
        super().__init__(message, hint=_FORMAT_HINT)
        self.path = path
        self.offset = offset


class GgufHeaderIncomplete(GgufError):
    """The bytes held end inside the header of a file that goes on: more bytes please.

    ``index`` is the part (of ``read_gguf_bytes``) whose bytes ran out; ``needed`` is the fewest
    bytes from its start the parse needs next (the header may need more after those).
    """

    def __init__(self, name: str, *, index: int, needed: int, held: int) -> None:
        super().__init__(
            f"{name}: the header goes on past the {held:,} bytes read (the next read needs "
            f"{needed:,})",
            hint="Read more of the start of the file and parse it again.",
        )
        self.name = name
        self.index = index
        self.needed = needed
        self.held = held


@dataclass(frozen=True)
class HeaderBytes:
    """The first bytes of one GGUF file, as read over the network, and the file's full size.

    ``name`` stands for the file in messages and in ``GgufFile.paths`` (a path in a repository).
    """

    name: str
    data: bytes
    file_size: int


# --------------------------------------------------------------------------------------------
# Lazy arrays
# --------------------------------------------------------------------------------------------


class LazyArray(Sequence[_T]):
    """A big metadata array kept as raw bytes; elements are decoded only on request."""

    @property
    @abstractmethod
    def value_type(self) -> GGUFValueType:
        """The GGUF element type."""

    @property
    def type_name(self) -> str:
        """Short element type name (``"string"``, ``"i32"``, ...)."""
        return _TYPE_NAMES[self.value_type]

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Bytes of the encoded array kept in memory."""

    @abstractmethod
    def to_list(self) -> list[_T]:
        """Decodes every element into a plain Python list."""

    def __iter__(self) -> Iterator[_T]:
        return iter(self.to_list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyArray):
            return self.value_type == other.value_type and self.to_list() == other.to_list()
        if isinstance(other, list | tuple):
            return len(other) == len(self) and self.to_list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        head = [self[i] for i in range(min(3, len(self)))]
        return f"{type(self).__name__}(type={self.type_name}, len={len(self)}, head={head!r})"


class LazyStringArray(LazyArray[str]):
    """An array of strings: the encoded bytes plus the offset of every element.

    Strings are decoded as UTF-8 with invalid bytes replaced; ``raw(i)`` gives the exact bytes.
    """

    def __init__(
        self, data: bytes, offsets: _Offsets | None, *, count: int = 0, big_endian: bool = False
    ) -> None:
        """Creates the array.

        Args:
            data: The encoded elements (each a u64 length followed by the bytes), back to back.
            offsets: Start of each element's length prefix within ``data``; None: found on the
                first element asked for (``data`` must then be exactly ``count`` whole elements,
                as the reader's walk found them).
            count: The number of elements where ``offsets`` is None.
            big_endian: The byte order of the lengths where ``offsets`` is None.
        """
        self._data = data
        self._found = offsets
        self._count = count if offsets is None else len(offsets)
        self._big_endian = big_endian

    @property
    def _offsets(self) -> _Offsets:
        if self._found is None:
            found: array.array[int] = array.array("q")
            append = found.append
            unpack = struct.Struct(">Q" if self._big_endian else "<Q").unpack_from
            data, pos = self._data, 0
            for _ in range(self._count):
                append(pos)
                pos += 8 + unpack(data, pos)[0]
            self._found = found
        return self._found

    @property
    def value_type(self) -> GGUFValueType:
        return GGUFValueType.STRING

    @property
    def nbytes(self) -> int:
        return len(self._data)

    def __len__(self) -> int:
        return self._count

    def _span(self, index: int) -> tuple[int, int]:
        n = self._count
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("LazyStringArray index out of range")
        start = int(self._offsets[index]) + 8
        end = int(self._offsets[index + 1]) if index + 1 < n else len(self._data)
        return start, end

    def raw(self, index: int) -> bytes:
        """The undecoded bytes of element ``index``."""
        start, end = self._span(index)
        return self._data[start:end]

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        start, end = self._span(index)
        return self._data[start:end].decode("utf-8", "replace")

    def to_list(self) -> list[str]:
        data = self._data
        starts: list[int] = self._offsets.tolist()
        ends = starts[1:]
        ends.append(len(data))
        return [
            data[s + 8 : e].decode("utf-8", "replace") for s, e in zip(starts, ends, strict=True)
        ]


class LazyNumberArray(LazyArray[int | float]):
    """An array of numbers or booleans kept as its encoded bytes (decoded through numpy)."""

    def __init__(self, data: bytes, value_type: GGUFValueType, *, big_endian: bool) -> None:
        """Creates the array.

        Args:
            data: The encoded elements, back to back.
            value_type: A scalar GGUF value type (not ``STRING`` or ``ARRAY``).
            big_endian: Whether the file is big-endian.
        """
        spec = _SCALARS[value_type]
        self._data = data
        self._value_type = value_type
        self._dtype = (">" if big_endian else "<") + spec[2]
        self._len = len(data) // spec[1]

    @property
    def value_type(self) -> GGUFValueType:
        return self._value_type

    @property
    def nbytes(self) -> int:
        return len(self._data)

    def __len__(self) -> int:
        return self._len

    def to_numpy(self) -> npt.NDArray[np.generic]:
        """The elements as a read-only numpy array (booleans as ``bool``)."""
        import numpy as np

        arr: npt.NDArray[np.generic] = np.frombuffer(self._data, dtype=np.dtype(self._dtype))
        if self._value_type == GGUFValueType.BOOL:
            flags: npt.NDArray[np.bool_] = np.not_equal(arr, 0)
            return flags
        return arr

    @overload
    def __getitem__(self, index: int) -> int | float: ...

    @overload
    def __getitem__(self, index: slice) -> list[int | float]: ...

    def __getitem__(self, index: int | slice) -> int | float | list[int | float]:
        arr = self.to_numpy()
        if isinstance(index, slice):
            sliced: list[int | float] = arr[index].tolist()
            return sliced
        if not -self._len <= index < self._len:
            raise IndexError("LazyNumberArray index out of range")
        item: int | float = arr[index].item()
        return item

    def to_list(self) -> list[int | float]:
        values: list[int | float] = self.to_numpy().tolist()
        return values


#: A metadata value: plain Python for scalars and small arrays, lazy for big arrays.
MetaValue: TypeAlias = (
    "int | float | bool | str | list[MetaValue] | LazyStringArray | LazyNumberArray"
)


# --------------------------------------------------------------------------------------------
# The file
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class GgufFile:
    """What a GGUF header says (for split models: all parts combined).

    ``metadata`` and ``value_types`` come from the first part. ``value_types`` names each
    key's type: ``"u32"``, ``"string"``, ``"array[string]"``, ``"array[array[i32]]"`` (nested
    arrays are named after their first element). Tensor offsets are relative to
    ``data_offsets[tensor.file_index]``.
    """

    paths: tuple[Path, ...]
    version: int
    big_endian: bool
    alignment: int
    metadata: Mapping[str, MetaValue]
    value_types: Mapping[str, str]
    tensors: tuple[TensorInfo, ...]
    data_offsets: tuple[int, ...]
    file_sizes: tuple[int, ...]
    header_sizes: tuple[int, ...]

    @property
    def path(self) -> Path:
        """The first (or only) file."""
        return self.paths[0]

    @property
    def data_offset(self) -> int:
        """Start of the tensor data in the first file."""
        return self.data_offsets[0]

    @property
    def file_size(self) -> int:
        """Bytes of all parts together."""
        return sum(self.file_sizes)

    @property
    def header_size(self) -> int:
        """Bytes parsed (headers of all parts up to the end of their tensor tables)."""
        return sum(self.header_sizes)

    @property
    def architecture(self) -> str | None:
        """``general.architecture`` when it is a string."""
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None

    @property
    def full_size(self) -> int:
        """Bytes of all parts together once every tensor's data is in its file."""
        return sum(
            max(
                [size]
                + [
                    self.data_offsets[t.file_index] + t.offset + t.n_bytes
                    for t in self.tensors
                    if t.file_index == index
                ]
            )
            for index, size in enumerate(self.file_sizes)
        )

    @property
    def has_tensor_data(self) -> bool:
        """Whether every tensor's bytes lie inside its file (False for header-only files)."""
        return all(
            self.data_offsets[t.file_index] + t.offset + t.n_bytes <= self.file_sizes[t.file_index]
            for t in self.tensors
        )

    def tensor(self, name: str) -> TensorInfo | None:
        """The tensor called ``name``, if any."""
        for t in self.tensors:
            if t.name == name:
                return t
        return None


@dataclass(frozen=True)
class _Part:
    path: Path
    version: int
    big_endian: bool
    alignment: int
    metadata: dict[str, MetaValue]
    value_types: dict[str, str]
    tensors: list[TensorInfo]
    header_size: int
    data_offset: int
    file_size: int


class _Parser:
    """Walks one GGUF header held in a buffer (an mmap); copies out only what it keeps.

    ``size`` bytes are held; ``file_size`` (default: ``size``) is the whole file's size. A read
    past the bytes held but inside the file raises ``GgufHeaderIncomplete`` (more bytes please);
    one past the end of the file is a format error.
    """

    def __init__(
        self,
        buf: mmap.mmap | bytes,
        size: int,
        name: str,
        file_index: int,
        lazy_threshold: int,
        file_size: int | None = None,
    ) -> None:
        self.buf = buf
        self.size = size
        self.file_size = size if file_size is None else max(file_size, size)
        self.name = name
        self.file_index = file_index
        self.lazy_threshold = lazy_threshold
        self.pos = 0
        self.big_endian = False
        self.e = "<"
        self.u32 = struct.Struct("<I")
        self.u64 = struct.Struct("<Q")

    # -- errors and primitives -----------------------------------------------------------------

    def fail(self, message: str, offset: int) -> GgufFormatError:
        return GgufFormatError(
            f"{self.name}: {message} at byte offset {offset}", path=self.name, offset=offset
        )

    def reach(self, end: int, message: str, offset: int) -> None:
        """Bytes up to ``end`` must be held: more bytes please when the file goes on that far,
        else the format error ``message`` at ``offset``."""
        if end <= self.size:
            return
        if end <= self.file_size:
            raise GgufHeaderIncomplete(self.name, index=self.file_index, needed=end, held=self.size)
        raise self.fail(message, offset)

    def need(self, n: int, what: str) -> int:
        p = self.pos
        self.reach(
            p + n,
            f"truncated header: {what} needs {n} bytes but the file ends at byte {self.file_size}",
            p,
        )
        return p

    def read_u32(self, what: str) -> int:
        p = self.need(4, what)
        self.pos = p + 4
        value: int = self.u32.unpack_from(self.buf, p)[0]
        return value

    def read_u64(self, what: str) -> int:
        p = self.need(8, what)
        self.pos = p + 8
        value: int = self.u64.unpack_from(self.buf, p)[0]
        return value

    def read_string(self, what: str) -> str:
        p = self.need(8, f"the length of {what}")
        (n,) = self.u64.unpack_from(self.buf, p)
        start = p + 8
        if n > self.file_size - start:
            raise self.fail(
                f"{what} claims {n} bytes but only {self.file_size - start} bytes remain in the "
                "file",
                p,
            )
        self.reach(start + n, what, p)
        self.pos = start + n
        return self.buf[start : start + n].decode("utf-8", "replace")

    def read_type(self, what: str) -> GGUFValueType:
        p = self.pos
        t = self.read_u32(what)
        if t not in _TYPE_NAMES:
            raise self.fail(f"unknown value type id {t} for {what}", p)
        return GGUFValueType(t)

    # -- values --------------------------------------------------------------------------------

    def read_value(self, vtype: GGUFValueType, what: str, depth: int) -> tuple[MetaValue, str]:
        """Reads one value; returns it with its type name."""
        spec = _SCALARS.get(vtype)
        if spec is not None:
            p = self.need(spec[1], f"the value of {what}")
            self.pos = p + spec[1]
            scalar: int | float | bool = struct.unpack_from(self.e + spec[0], self.buf, p)[0]
            return scalar, spec[3]
        if vtype == GGUFValueType.STRING:
            return self.read_string(f"the string value of {what}"), "string"
        return self.read_array(what, depth)

    def read_array(self, what: str, depth: int) -> tuple[MetaValue, str]:
        if depth >= _MAX_NESTING:
            raise self.fail(f"{what} nests arrays more than {_MAX_NESTING} levels deep", self.pos)
        etype = self.read_type(f"the element type of array {what}")
        count_at = self.pos
        count = self.read_u64(f"the element count of array {what}")
        remaining = self.file_size - self.pos
        min_bytes = count * _MIN_ELEMENT_BYTES[etype]
        if min_bytes > remaining:
            raise self.fail(
                f"array {what} claims {count} {_TYPE_NAMES[etype]} elements (at least "
                f"{min_bytes} bytes) but only {remaining} bytes remain in the file",
                count_at,
            )
        ename = _TYPE_NAMES[etype]
        spec = _SCALARS.get(etype)
        if spec is not None:
            start = self.pos
            end = start + count * spec[1]
            self.reach(end, f"array {what}", start)
            self.pos = end
            if count > self.lazy_threshold:
                lazy = LazyNumberArray(
                    bytes(self.buf[start:end]), etype, big_endian=self.big_endian
                )
                return lazy, f"array[{ename}]"
            values = list(struct.unpack_from(f"{self.e}{count}{spec[0]}", self.buf, start))
            return values, f"array[{ename}]"
        if etype == GGUFValueType.STRING:
            if count > self.lazy_threshold:
                start = self.pos
                end, offsets = self.scan_strings(count, what)
                self.reach(end, f"array {what}", start)
                self.pos = end
                data = bytes(self.buf[start:end])
                lazy_strings = LazyStringArray(
                    data, offsets, count=count, big_endian=self.big_endian
                )
                return lazy_strings, "array[string]"
            strings: list[MetaValue] = [
                self.read_string(f"element {i} of array {what}") for i in range(count)
            ]
            return strings, "array[string]"
        # nested arrays
        items: list[MetaValue] = []
        inner = "array"  # the element type of an empty nested array is unknown
        for i in range(count):
            item, item_type = self.read_array(f"element {i} of array {what}", depth + 1)
            if i == 0:
                inner = item_type
            items.append(item)
        return items, f"array[{inner}]"

    def scan_strings(self, count: int, what: str) -> tuple[int, _Offsets | None]:
        """Skips ``count`` length-prefixed strings from ``self.pos`` without decoding them.

        Returns the end offset and the start of every element relative to ``self.pos`` (None
        where the plain walk found them whole: ``LazyStringArray`` finds them when asked).

        Fast path, per window of 128 KiB: every position whose next 7 bytes are zero (the
        high bytes of a u64 length below 256) is a candidate element start. Starting from a
        known element start, a candidate whose end (start + 8 + length) is the next candidate
        starts the next element (by induction), so whole runs of elements are accepted with a
        few numpy operations. Where such a run breaks (a string of 256+ bytes, zero bytes in a
        string, the window's edge) one element is read the slow way and the run resumes.
        Correctness never depends on which positions are candidates, only speed does; if runs
        break too often, the rest is walked by a plain loop.

        Without numpy loaded, arrays up to ``_PLAIN_SCAN_MAX`` elements are walked by the plain
        loop alone: it is quicker than importing numpy (about 0.1 µs per element against
        0.08 s), which keeps numpy off the launch path and ``plan --demo`` (two arrays of 248k).
        """
        if _walk_plainly(count):
            end = self._skip_plain(self.pos, count)
            if end is not None:
                return end, None
            return self._scan_plain(self.pos, count, 0, what, self.pos)
        import numpy as np

        big = self.big_endian
        size = self.size
        buf = self.buf
        u64 = self.u64
        pos = self.pos
        remaining = count
        chunks: list[npt.NDArray[np.int64]] = []
        done = 0
        slow_steps = 0

        def slow_step(at: int, index: int) -> int:
            self.check_element(at, index, what)
            (n,) = u64.unpack_from(buf, at)
            end: int = at + 8 + n
            return end

        while remaining > 0 and (slow_steps < 64 or slow_steps * 16 < done):
            base = pos
            wend = min(size, pos + min(_SCAN_WINDOW, remaining * 64 + 64))
            if wend - pos >= 8:
                seg = np.frombuffer(buf, dtype=np.uint8, count=wend - pos, offset=pos)
                z = seg == 0
                z2 = z[:-1] & z[1:]  # z2[i]: bytes i..i+1 are zero
                z4 = z2[:-2] & z2[2:]  # bytes i..i+3
                z7 = z4[:-3] & z4[3:]  # bytes i..i+6
                # candidate i: bytes i+1..i+7 (little-endian) or i..i+6 (big-endian) are zero
                cand = np.flatnonzero(z7[:-1] if big else z7[1:])
                lens = seg[cand + 7] if big else seg[cand]
                nxt = cand + 8 + lens.astype(np.int64)
                brk = np.flatnonzero(nxt[:-1] != cand[1:])
            else:
                cand = nxt = brk = np.zeros(0, dtype=np.int64)
            n_cand, n_brk = len(cand), len(brk)
            rel = 0
            while remaining > 0:
                i = int(np.searchsorted(cand, rel))
                if i >= n_cand and rel > 0:
                    break  # past the last candidate: next window
                if i < n_cand and cand[i] == rel:
                    b = int(np.searchsorted(brk, i))
                    stop = int(brk[b]) if b < n_brk else n_cand - 1
                    t = min(stop - i, remaining)
                    if t > 0:
                        chunks.append(cand[i : i + t] + base)
                        rel = int(nxt[i + t - 1])
                        remaining -= t
                        done += t
                        continue
                # The run broke here: read one element the slow way.
                chunks.append(np.array([base + rel], dtype=np.int64))
                rel = slow_step(base + rel, done) - base
                remaining -= 1
                done += 1
                slow_steps += 1
                if slow_steps >= 64 and slow_steps * 16 >= done:
                    break
            pos = base + rel
        # Plain loop for whatever is left.
        pos, offsets_tail = self._scan_plain(pos, remaining, done, what, 0)
        if len(offsets_tail):
            chunks.append(np.frombuffer(offsets_tail, dtype=np.int64).copy())
        offsets = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
        offsets -= self.pos
        return pos, offsets

    def check_element(self, at: int, index: int, what: str) -> None:
        """The length of the string element at ``at`` and its claim, checked against the file
        (a claim past the bytes held but inside the file is left to the caller's ``reach``)."""
        self.reach(
            at + 8,
            f"truncated header: the length of element {index} of array {what} needs 8 bytes but "
            f"the file ends at byte {self.file_size}",
            at,
        )
        (n,) = self.u64.unpack_from(self.buf, at)
        if n > self.file_size - at - 8:
            raise self.fail(
                f"element {index} of array {what} claims {n} bytes but only "
                f"{self.file_size - at - 8} bytes remain in the file",
                at,
            )

    def _skip_plain(self, pos: int, count: int) -> int | None:
        """The end of ``count`` strings from ``pos``, each length trusted (the loop a large
        vocabulary takes, at a third of the checked walk's cost), or None when the walk does
        not end within the bytes held. Where it does, every element did (each starts where
        the one before ends), so every check of ``_scan_plain`` would have passed."""
        buf = self.buf
        unpack = self.u64.unpack_from
        try:
            for _ in range(count):
                pos += 8 + unpack(buf, pos)[0]
        except (struct.error, OverflowError):  # a length past the buffer or past any offset
            return None
        return pos if pos <= self.size else None

    def _scan_plain(
        self, pos: int, count: int, index: int, what: str, base: int
    ) -> tuple[int, array.array[int]]:
        """Walks ``count`` strings from ``pos`` one by one, checking each: (end offset, each
        element's start minus ``base``); a length past the file is an error naming it."""
        size = self.size
        buf = self.buf
        offsets: array.array[int] = array.array("q")
        unpack = self.u64.unpack_from
        append = offsets.append
        for _ in range(count):
            if pos + 8 > size:
                self.check_element(pos, index, what)
            n = unpack(buf, pos)[0]
            if n > size - pos - 8:
                self.check_element(pos, index, what)
            append(pos - base)
            pos += 8 + n
            index += 1
        return pos, offsets

    # -- the header ----------------------------------------------------------------------------

    def parse(self, path: Path) -> _Part:
        buf = self.buf
        self.reach(4, f"not a GGUF file: only {self.file_size} bytes, too short for the magic", 0)
        magic = bytes(buf[0:4])
        if magic != b"GGUF":
            error = self.fail(f"not a GGUF file: the magic is {magic!r}, expected b'GGUF'", 0)
            if magic.lstrip()[:1] == b"{":
                error.hint = "It is JSON, perhaps a plan file: give plan files with --plan."
            raise error
        self.pos = 4
        self.need(4, "the version")
        v_le: int = struct.unpack_from("<I", buf, 4)[0]
        v_be: int = struct.unpack_from(">I", buf, 4)[0]
        if v_le in (1, *_SUPPORTED_VERSIONS):
            version = v_le
        elif v_be in (1, *_SUPPORTED_VERSIONS):
            version = v_be
            self.big_endian = True
            self.e = ">"
            self.u32 = struct.Struct(">I")
            self.u64 = struct.Struct(">Q")
        else:
            raise self.fail(
                f"unsupported GGUF version {v_le} (this reader supports versions 2 and 3)", 4
            )
        if version == 1:
            raise self.fail(
                "GGUF version 1 is not supported (only versions 2 and 3; re-convert the model "
                "with a current llama.cpp)",
                4,
            )
        self.pos = 8
        n_tensors = self.read_u64("the tensor count")
        n_kv = self.read_u64("the metadata entry count")
        remaining = self.file_size - self.pos
        if n_kv * _MIN_KV_BYTES > remaining:
            raise self.fail(
                f"the header claims {n_kv} metadata entries (at least {n_kv * _MIN_KV_BYTES} "
                f"bytes) but only {remaining} bytes remain in the file",
                16,
            )
        if n_kv * _MIN_KV_BYTES + n_tensors * _MIN_TENSOR_INFO_BYTES > remaining:
            raise self.fail(
                f"the header claims {n_tensors} tensors (at least "
                f"{n_tensors * _MIN_TENSOR_INFO_BYTES} bytes of tensor table) but only "
                f"{remaining} bytes remain in the file",
                8,
            )

        metadata: dict[str, MetaValue] = {}
        value_types: dict[str, str] = {}
        alignment = 32
        for k in range(n_kv):
            key_at = self.pos
            key = self.read_string(f"the key of metadata entry {k}")
            if key in metadata:
                raise self.fail(f"duplicate metadata key {key!r}", key_at)
            vtype = self.read_type(f"the value type of key {key!r}")
            value_at = self.pos
            value, tname = self.read_value(vtype, f"key {key!r}", 0)
            metadata[key] = value
            value_types[key] = tname
            if key == "general.alignment":
                if (
                    not isinstance(value, int)
                    or isinstance(value, bool)
                    or value <= 0
                    or value & (value - 1)
                ):
                    raise self.fail(
                        f"general.alignment is {value!r}; it must be a power of two", value_at
                    )
                alignment = value

        tensors: list[TensorInfo] = []
        names: set[str] = set()
        for t in range(n_tensors):
            name_at = self.pos
            name = self.read_string(f"the name of tensor {t}")
            if name in names:
                raise self.fail(f"duplicate tensor name {name!r}", name_at)
            names.add(name)
            dims_at = self.pos
            n_dims = self.read_u32(f"the dimension count of tensor {name!r}")
            if n_dims > _MAX_DIMS:
                raise self.fail(
                    f"tensor {name!r} has {n_dims} dimensions (GGUF allows at most {_MAX_DIMS})",
                    dims_at,
                )
            p = self.need(8 * n_dims, f"the dimensions of tensor {name!r}")
            shape: tuple[int, ...] = struct.unpack_from(f"{self.e}{n_dims}Q", self.buf, p)
            self.pos = p + 8 * n_dims
            n_elements = 1
            for d in shape:
                n_elements *= d
            if any(d > _INT64_MAX for d in shape) or n_elements > _INT64_MAX:
                raise self.fail(
                    f"tensor {name!r} has absurd dimensions {list(shape)} ({n_elements} elements)",
                    p,
                )
            type_at = self.pos
            type_id = self.read_u32(f"the type of tensor {name!r}")
            known = TENSOR_TYPES.get(type_id)
            if known is None:
                raise self.fail(f"tensor {name!r} has unknown ggml type id {type_id}", type_at)
            qname, block_size, _type_size = known
            if shape and shape[0] % block_size:
                raise self.fail(
                    f"tensor {name!r}: first dimension {shape[0]} is not a multiple of the "
                    f"{qname} block size {block_size}",
                    p,
                )
            offset_at = self.pos
            offset = self.read_u64(f"the data offset of tensor {name!r}")
            if offset % alignment:
                raise self.fail(
                    f"tensor {name!r} has data offset {offset}, not a multiple of the "
                    f"alignment {alignment}",
                    offset_at,
                )
            tensors.append(
                TensorInfo(
                    name=name,
                    ggml_type=type_id,
                    type_name=qname,
                    shape=shape,
                    n_bytes=tensor_bytes(type_id, shape),
                    offset=offset,
                    file_index=self.file_index,
                )
            )
        header_size = self.pos
        data_offset = -(-header_size // alignment) * alignment
        return _Part(
            path=path,
            version=version,
            big_endian=self.big_endian,
            alignment=alignment,
            metadata=metadata,
            value_types=value_types,
            tensors=tensors,
            header_size=header_size,
            data_offset=data_offset,
            file_size=self.file_size,
        )


def _read_part(path: Path, file_index: int, lazy_threshold: int) -> _Part:
    try:
        st = os.stat(path)  # before open(): opening a FIFO would block
        if stat.S_ISDIR(st.st_mode):
            raise GgufError(f"{path} is a directory, not a GGUF file")
        if not stat.S_ISREG(st.st_mode):
            raise GgufError(f"{path} is not a regular file")
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise GgufFormatError(
                    f"{path}: the file is empty (0 bytes) at byte offset 0",
                    path=str(path),
                    offset=0,
                )
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise GgufError(
            f"GGUF file not found: {path}", hint="Check the path and file name."
        ) from None
    except OSError as exc:
        raise GgufError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return _Parser(mm, size, str(path), file_index, lazy_threshold).parse(path)
    finally:
        # If a traceback still holds a view, the mapping closes when it is freed.
        with contextlib.suppress(BufferError):
            mm.close()


def split_part_paths(path: str | os.PathLike[str]) -> tuple[Path, ...] | None:
    """All part paths of a split model named ``X-00001-of-0000N.gguf``.

    Args:
        path: Any one part (or any GGUF path).

    Returns:
        The N part paths in order (the digit widths of ``path`` are kept), or ``None`` when the
        name does not follow the split pattern.
    """
    p = Path(path)
    m = _SPLIT_RE.match(p.name)
    if m is None:
        return None
    no_width, count_width = len(m["no"]), len(m["count"])
    count = int(m["count"])
    if count < 1 or not 1 <= int(m["no"]) <= count:
        return None
    return tuple(
        p.with_name(f"{m['prefix']}-{i:0{no_width}d}-of-{count:0{count_width}d}.gguf")
        for i in range(1, count + 1)
    )


def _split_int(part: _Part, key: str) -> int | None:
    value = part.metadata.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise GgufError(f"{part.path}: {key} is {value!r}, not an integer")
    return value


def read_gguf(
    path: str | os.PathLike[str], *, lazy_threshold: int = DEFAULT_LAZY_THRESHOLD
) -> GgufFile:
    """Reads a GGUF header (v2/v3, little- or big-endian): metadata and tensor table.

    Only the header is read (through an mmap), never tensor data; a file that ends right after
    its tensor table reads fine. Given any part of a split model (``X-00001-of-0000N.gguf``),
    all parts are read and their tensor tables combined (``TensorInfo.file_index``); metadata
    comes from the first part.

    Args:
        path: The GGUF file, or any part of a split model.
        lazy_threshold: Arrays with more elements than this are returned as ``LazyArray``
            objects (decoded on request) instead of lists.

    Returns:
        The parsed header.

    Raises:
        GgufError: The file is missing, unreadable or malformed (``GgufFormatError`` says at
            which byte offset), or a part of a split model is missing or inconsistent.
    """
    given = Path(path)
    parts_paths = split_part_paths(given)
    first_path = parts_paths[0] if parts_paths else given
    if parts_paths and first_path != given and not first_path.exists():
        raise GgufError(
            f"split model part 1 of {len(parts_paths)} is missing: {first_path}",
            hint="Download every part of the split model into the same folder.",
        )
    first = _read_part(first_path, 0, lazy_threshold)
    count = _split_int(first, "split.count")
    if count is None or count <= 1:
        if parts_paths and len(parts_paths) > 1 and first_path != given:
            raise GgufError(f"{first_path} has no split.count key but is named like a split part")
        parts = [first]
    else:
        if parts_paths is None or len(parts_paths) != count:
            raise GgufError(
                f"{first_path} is part of a {count}-part split model, but its name does not "
                f"follow the X-00001-of-{count:05d}.gguf pattern, so the other parts cannot be "
                "found",
                hint="Keep the original file names of split models.",
            )
        parts = [first]
        for i, part_path in enumerate(parts_paths[1:], start=1):
            if not part_path.exists():
                raise GgufError(
                    f"split model part {i + 1} of {count} is missing: {part_path}",
                    hint="Download every part of the split model into the same folder.",
                )
            parts.append(_read_part(part_path, i, lazy_threshold))
    return _combined(parts)


def _combined(parts: Sequence[_Part]) -> GgufFile:
    """One GgufFile from a model's parts in order, checked against each other."""
    first = parts[0]
    if len(parts) > 1:
        count = len(parts)
        for i, part in enumerate(parts):
            no = _split_int(part, "split.no")
            if no is not None and no != i:
                raise GgufError(f"{part.path} says it is split part {no + 1}, expected {i + 1}")
            part_count = _split_int(part, "split.count")
            if part_count is not None and part_count != count:
                raise GgufError(
                    f"{part.path} says the model has {part_count} parts, but {count} parts were "
                    "found"
                )
    tensors = tuple(t for part in parts for t in part.tensors)
    seen: set[str] = set()
    for t in tensors:
        if t.name in seen:
            raise GgufError(f"tensor {t.name!r} appears in more than one split part")
        seen.add(t.name)
    expected = _split_int(first, "split.tensors.count")
    if len(parts) > 1 and expected is not None and expected != len(tensors):
        raise GgufError(
            f"split model {first.path} should have {expected} tensors but its parts hold "
            f"{len(tensors)}"
        )
    return GgufFile(
        paths=tuple(p.path for p in parts),
        version=first.version,
        big_endian=first.big_endian,
        alignment=first.alignment,
        metadata=first.metadata,
        value_types=first.value_types,
        tensors=tensors,
        data_offsets=tuple(p.data_offset for p in parts),
        file_sizes=tuple(p.file_size for p in parts),
        header_sizes=tuple(p.header_size for p in parts),
    )


def read_gguf_bytes(
    parts: Sequence[HeaderBytes], *, lazy_threshold: int = DEFAULT_LAZY_THRESHOLD
) -> GgufFile:
    """Reads GGUF headers from the first bytes of each file (a remote file read by range).

    The same reader as ``read_gguf``, over bytes in memory instead of a file: ``parts`` are a
    model's files in order (one, or every part of a split model); metadata comes from the
    first, tensor tables are combined.

    Args:
        parts: Each file's first bytes and full size.
        lazy_threshold: As for ``read_gguf``.

    Returns:
        The parsed header (``paths`` are the parts' names).

    Raises:
        GgufHeaderIncomplete: A part's bytes end inside its header: read at least ``needed``
            bytes of part ``index`` and call again.
        GgufError: A header is malformed or the parts do not belong together.
    """
    if not parts:
        raise GgufError("no GGUF file was given")
    count = None
    read: list[_Part] = []
    for i, part in enumerate(parts):
        parser = _Parser(
            part.data, len(part.data), part.name, i, lazy_threshold, file_size=part.file_size
        )
        read.append(parser.parse(Path(part.name)))
        if i == 0:
            count = _split_int(read[0], "split.count")
    if (count or 1) != len(parts):
        raise GgufError(
            f"{parts[0].name} says the model has {count or 1} parts, but {len(parts)} were given",
            hint="Keep every part of a split model, named X-00001-of-0000N.gguf.",
        )
    return _combined(read)


# --------------------------------------------------------------------------------------------
# ModelInfo
# --------------------------------------------------------------------------------------------


class _Keys:
    """Typed access to a GgufFile's metadata with one-sentence errors."""

    def __init__(self, g: GgufFile) -> None:
        self.g = g
        self.md = g.metadata
        self.where = str(g.path)

    def error(self, message: str) -> GgufError:
        return GgufError(
            f"{self.where}: {message}",
            hint="The GGUF header lacks facts mtpstudio needs; re-convert or re-download it.",
        )

    def describe(self, key: str) -> str:
        return self.g.value_types.get(key, "?")

    def string(self, key: str, *, required: bool = False) -> str | None:
        value = self.md.get(key)
        if value is None:
            if required:
                raise self.error(f"required key {key!r} is missing")
            return None
        if not isinstance(value, str):
            raise self.error(f"key {key!r} should be a string but is {self.describe(key)}")
        return value

    def per_layer(self, key: str) -> list[int] | None:
        """An integer key that may also be a per-layer array; None when absent."""
        value = self.md.get(key)
        if value is None:
            return None
        items: Sequence[object]
        if isinstance(value, list | LazyStringArray | LazyNumberArray):
            items = value.to_list() if isinstance(value, LazyArray) else value
        else:
            items = [value]
        out: list[int] = []
        for item in items:
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise self.error(
                    f"key {key!r} should be a non-negative integer (or one per layer) but is "
                    f"{self.describe(key)} {_short(value)}"
                )
            out.append(item)
        if not out:
            raise self.error(f"key {key!r} is an empty array")
        return out

    def integer(self, key: str, *, required: bool = False, default: int = 0) -> int:
        """An integer key; per-layer arrays give their maximum."""
        values = self.per_layer(key)
        if values is None:
            if required:
                raise self.error(f"required key {key!r} is missing")
            return default
        return max(values)


def _number(value: MetaValue | None) -> float:
    """A float key's value (0 when absent or not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value)


def _short(value: MetaValue) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _file_type_name(value: MetaValue | None) -> str | None:
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        return None
    name = FILE_TYPES.get(value)
    if name is None:
        return f"FTYPE_{value}"
    for prefix in ("MOSTLY_", "ALL_"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def _vocab_size(keys: _Keys, arch: str, tensors: Sequence[TensorInfo]) -> int:
    tokens = keys.md.get("tokenizer.ggml.tokens")
    if isinstance(tokens, list | LazyStringArray | LazyNumberArray):
        return len(tokens)
    size = keys.integer(f"{arch}.vocab_size")
    if size:
        return size
    for t in tensors:
        if t.name == "token_embd.weight" and len(t.shape) >= 2:
            return t.shape[1]
    return 0


def _recurrent_layers(
    keys: _Keys, arch: str, n_layer: int, interval: int, head_kv: list[int] | None
) -> tuple[int, ...]:
    key = f"{arch}.attention.recurrent_layers"
    flags = keys.md.get(key)
    if flags is not None:
        if not isinstance(flags, list | LazyNumberArray):
            raise keys.error(f"key {key!r} should be a bool array but is {keys.describe(key)}")
        values = flags.to_list() if isinstance(flags, LazyNumberArray) else flags
        return tuple(i for i, flag in enumerate(values[:n_layer]) if flag)
    if arch in _RECURRENT_ARCHS:
        return tuple(range(n_layer))
    if arch in _INTERVAL_HYBRID_ARCHS and interval > 0:
        return tuple(i for i in range(n_layer) if (i + 1) % interval != 0)
    if head_kv is not None and len(head_kv) > 1 and 0 in head_kv[:n_layer]:
        # Hybrid models with per-layer KV head counts (jamba, granitehybrid, nemotron_h,
        # lfm2 ...): layers without KV heads hold recurrent state.
        return tuple(i for i, n in enumerate(head_kv[:n_layer]) if n == 0)
    return ()


def model_info_from_gguf(g: GgufFile) -> ModelInfo:
    """Derives the typed model facts from a parsed GGUF header.

    Args:
        g: A header from ``read_gguf``.

    Returns:
        The model's architecture, layer layout (trunk, MTP/nextn, recurrent layers),
        attention, expert and SSM sizes, vocabulary, file size and tensor statistics.

    Raises:
        GgufError: ``general.architecture``, ``{arch}.block_count`` or
            ``{arch}.embedding_length`` is missing, or a key has the wrong type or an absurd
            value.
    """
    keys = _Keys(g)
    arch = keys.string("general.architecture", required=True)
    assert arch is not None
    if has_control(arch):
        raise keys.error(f"general.architecture is {visible(arch)!r}, not an architecture name")
    block_count = keys.integer(f"{arch}.block_count", required=True)
    if not 0 < block_count <= _MAX_LAYERS:
        raise keys.error(f"{arch}.block_count is {block_count}, which is absurd")
    n_nextn = keys.integer(f"{arch}.nextn_predict_layers")
    if n_nextn > block_count:
        raise keys.error(
            f"{arch}.nextn_predict_layers ({n_nextn}) exceeds {arch}.block_count ({block_count})"
        )
    n_layer = block_count - n_nextn
    n_embd = keys.integer(f"{arch}.embedding_length", required=True)
    n_head = keys.integer(f"{arch}.attention.head_count")
    head_kv = keys.per_layer(f"{arch}.attention.head_count_kv")
    n_head_kv = max(head_kv) if head_kv is not None else n_head
    default_head_dim = n_embd // n_head if n_head else 0
    key_length = keys.integer(f"{arch}.attention.key_length", default=default_head_dim)
    value_length = keys.integer(f"{arch}.attention.value_length", default=default_head_dim)
    interval = keys.integer(
        f"{arch}.full_attention_interval",
        default=_DEFAULT_FULL_ATTENTION_INTERVAL if arch in _INTERVAL_HYBRID_ARCHS else 0,
    )
    tensors = g.tensors
    quant_mix: dict[str, int] = {}
    for t in tensors:
        quant_mix[t.type_name] = quant_mix.get(t.type_name, 0) + t.n_bytes
    name = next(
        (
            v
            for k in ("general.name", "general.basename")
            if isinstance(v := g.metadata.get(k), str) and v
        ),
        None,
    )
    if not name:
        stem = g.path.name.removesuffix(".gguf")
        m = _SPLIT_RE.match(g.path.name)
        name = m["prefix"] if m else stem
    name = visible(name)  # shown on terminals and in the window: never an escape sequence
    return ModelInfo(
        architecture=arch,
        name=name,
        block_count=block_count,
        n_layer=n_layer,
        n_nextn_layer=n_nextn,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        key_length=key_length,
        value_length=value_length,
        context_length=keys.integer(f"{arch}.context_length"),
        vocab_size=_vocab_size(keys, arch, tensors),
        n_expert=keys.integer(f"{arch}.expert_count"),
        n_expert_used=keys.integer(f"{arch}.expert_used_count"),
        ffn_length=keys.integer(f"{arch}.feed_forward_length"),
        expert_ffn_length=keys.integer(f"{arch}.expert_feed_forward_length"),
        shared_expert_ffn_length=keys.integer(f"{arch}.expert_shared_feed_forward_length"),
        full_attention_interval=interval,
        recurrent_layers=_recurrent_layers(keys, arch, n_layer, interval, head_kv),
        ssm_conv_kernel=keys.integer(f"{arch}.ssm.conv_kernel"),
        ssm_inner_size=keys.integer(f"{arch}.ssm.inner_size"),
        ssm_state_size=keys.integer(f"{arch}.ssm.state_size"),
        ssm_time_step_rank=keys.integer(f"{arch}.ssm.time_step_rank"),
        ssm_group_count=keys.integer(f"{arch}.ssm.group_count"),
        sliding_window=keys.integer(f"{arch}.attention.sliding_window"),
        n_dense_lead=keys.integer(f"{arch}.leading_dense_block_count"),
        expert_weights_norm=g.metadata.get(f"{arch}.expert_weights_norm") is True,
        expert_weights_scale=_number(g.metadata.get(f"{arch}.expert_weights_scale")),
        file_size=g.file_size,
        full_file_size=g.full_size,
        data_start=sum(g.data_offsets),
        n_params=sum(t.n_elements for t in tensors),
        tensor_bytes=sum(t.n_bytes for t in tensors),
        tensors=tensors,
        quant_mix=quant_mix,
        file_type=_file_type_name(g.metadata.get("general.file_type")),
        paths=tuple(str(p) for p in g.paths),
    )


def read_model_info(path: str | os.PathLike[str]) -> ModelInfo:
    """Reads a GGUF header and derives its ModelInfo.

    Args:
        path: The GGUF file, or any part of a split model.

    Returns:
        The model facts (see ``model_info_from_gguf``).

    Raises:
        GgufError: The file is missing, malformed, or lacks required keys.
    """
    return model_info_from_gguf(read_gguf(path))
