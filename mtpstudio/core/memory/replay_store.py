"""Replayed compute buffers kept between runs (``$XDG_CACHE_HOME/mtpstudio/replays.json``).

A replay (``hybrid_graph``, ``trunk_graph``, ``nextn_graph``) is a pure function of hashable
inputs: the model's sizes, the graph's shape and the backend's rules. Its answer is stored under
a digest of those inputs and of the source of the memory model's modules (``code_digest``), so a
changed rule or allocator never reads an answer of the old code: a file made by other code is
ignored and replaced. The file is hostile input like every cache: it is read through
``state_files.load_cache`` (a file of the wrong shape is set aside and rebuilt), every answer is
a byte count in range (or a short list of counts, the speed model's nodes per block), and each
entry carries a seal over its key and its answer: an entry whose seal does not match, or whose
answer is not of the replay's kind, is not used (the replay runs and its answer replaces the
entry), so a damaged or edited entry cannot change a figure. At most ``MAX_ENTRIES`` answers
are kept, the least recently used dropped first; new answers are written once, at exit.

Only inputs built of the memory model's own dataclasses, tuples, frozensets and plain values
have a stable digest; a call with anything else (a test's own rules) is replayed and not kept.
"""

from __future__ import annotations

import atexit
import dataclasses
import enum
import functools
import hashlib
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, cast

from mtpstudio.core.atomic import WriteError, write_text_atomic
from mtpstudio.core.paths import cache_dir
from mtpstudio.core.state_files import SchemaError, load_cache

log = logging.getLogger(__name__)

CACHE_NAME = "replays.json"
FORMAT = 1
MAX_ENTRIES = 4096
"""Answers kept (about 70 bytes each): a plan and its levers ask for about a hundred."""
MAX_BYTES = 1024 * 1024
MAX_VALUE = 1 << 50
"""A compute buffer above a petabyte is no answer of a replay."""
MAX_COUNTS = 4096
"""Numbers in one answer of several (``graph_nodes``: two per block and the output's)."""
KEYED_PACKAGE = "mtpstudio.core.memory"
"""Only dataclasses of this package are keyed (their source is in ``code_digest``)."""
DISABLE_ENV = "MTPSTUDIO_NO_REPLAY_CACHE"
"""Set (to anything) to replay every buffer and keep nothing (benchmarks of a first run)."""

P = ParamSpec("P")
Answer = int | tuple[int, ...]
"""A replay's answer: a byte count, or a few counts (``speed.graph_nodes``)."""
A = TypeVar("A", int, tuple[int, ...])


class Unkeyable(ValueError):
    """An input without a stable digest (not built of the memory model's own types)."""


_PLAIN = frozenset({int, str, bool, type(None)})
"""Types ``canonical`` keeps as they are (exactly these: not an enum or another subclass)."""


def canonical(value: object) -> object:
    """``value`` as plain JSON data that is equal for equal inputs in every process (frozensets
    sorted, dataclasses by class and fields; the hash seed plays no part)."""
    if isinstance(value, enum.Enum):
        return ["e", _class_name(type(value)), canonical(value.value)]
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return ["f", repr(value)]
    if isinstance(value, tuple | list):
        if all(type(v) in _PLAIN for v in value):  # the common case, made quicker
            return ["t", list(value)]
        return ["t", [canonical(v) for v in value]]
    if isinstance(value, frozenset | set):
        items = [canonical(v) for v in value]
        try:
            items.sort()
        except TypeError:  # items of mixed types: by their text
            items.sort(key=lambda v: json.dumps(v, sort_keys=True))
        return ["s", items]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if type(value).__hash__ is None:  # a mutable dataclass: made each time
            return _dataclass_form(value)
        return _canonical_dataclass(cast("Hashable", value))
    raise Unkeyable(f"no stable digest for a {type(value).__name__}")


@functools.lru_cache(maxsize=256)
def _canonical_dataclass(value: Hashable) -> object:
    """A frozen dataclass's ``canonical`` form, made once per distinct value: the rules and
    the model's sizes come back for every buffer of a budget."""
    return _dataclass_form(value)


def _dataclass_form(value: Any) -> object:
    fields = {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return ["d", _class_name(type(value)), fields]


def _class_name(cls: type) -> str:
    if cls.__module__ != KEYED_PACKAGE and not cls.__module__.startswith(KEYED_PACKAGE + "."):
        raise Unkeyable(f"{cls.__module__}.{cls.__qualname__} is not the memory model's")
    return f"{cls.__module__}.{cls.__qualname__}"


@functools.cache
def code_digest() -> str:
    """SHA-256 of the source of every module of the memory model (the replays, the rules, the
    scheduler, the allocator) and of ``units``; empty when a source file cannot be read (an
    install without sources: then nothing is stored)."""
    memory = Path(__file__).parent
    digest = hashlib.sha256(f"replays {FORMAT}\n".encode())
    try:
        files = [*sorted(memory.glob("*.py")), memory.parent / "units.py"]
        for path in files:
            digest.update(f"{path.name}\n".encode())
            digest.update(path.read_bytes())
    except OSError:
        return ""
    return digest.hexdigest()


@functools.cache
def source_digest(module: str) -> str:
    """SHA-256 of the source of ``module`` (a replay outside the memory model: its own code
    is part of its answers' keys); empty when it cannot be read."""
    path = getattr(sys.modules.get(module), "__file__", None)
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else ""
    except OSError:
        return ""


def _seal(code: str, key: str, value: Answer) -> str:
    text = str(value) if isinstance(value, int) else json.dumps(list(value))
    return hashlib.blake2b(f"{code}:{key}:{text}".encode(), digest_size=8).hexdigest()


def _in_range(value: object) -> bool:
    return type(value) is int and 0 <= value < MAX_VALUE


def _answer(value: object) -> Answer | None:
    """A stored answer as the replays give it (a list as a tuple), or None when it is none."""
    if _in_range(value):
        return cast("int", value)
    if isinstance(value, list) and len(value) <= MAX_COUNTS and all(map(_in_range, value)):
        return tuple(value)
    return None


def _is_hex(text: object, length: int) -> bool:
    if not isinstance(text, str) or len(text) != length:
        return False
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def check_store(data: Any) -> tuple[str, dict[str, tuple[Answer, str]]]:
    """The (code digest, entries) of a parsed store; SchemaError for any other shape."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SchemaError(f"is not format {FORMAT} of mtpstudio's replay cache")
    code, entries = data.get("code"), data.get("entries")
    if not isinstance(code, str) or not _is_hex(code, 64) or not isinstance(entries, dict):
        raise SchemaError("has no code digest or no entries")
    if len(entries) > MAX_ENTRIES:
        raise SchemaError(f"holds {len(entries)} entries, more than {MAX_ENTRIES}")
    out: dict[str, tuple[Answer, str]] = {}
    for key, entry in entries.items():
        if not _is_hex(key, 32):
            raise SchemaError(f"has an entry named {key[:40]!r}, not a digest")
        if not (isinstance(entry, list) and len(entry) == 2):
            raise SchemaError(f"has entry {key} that is not [bytes, seal]")
        value, seal = _answer(entry[0]), entry[1]
        if value is None or not _is_hex(seal, 16):
            raise SchemaError(f"has entry {key} whose answer or seal are out of shape")
        out[key] = (value, seal)
    return code, out


class ReplayStore:
    """The answers of earlier replays, read from ``path`` on first use and written back (when
    new ones came) by ``save``. Thread-safe: the GUI's tasks replay in worker threads."""

    def __init__(self, path: Callable[[], Path], code: Callable[[], str] = code_digest) -> None:
        self._path = path
        self._code = code
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[Answer, str]] | None = None
        self._dirty = False
        self.hits = 0
        """Answers read back."""
        self.misses = 0
        """Answers asked for and not found (or not trusted): replayed."""
        self.rejected = 0
        """Entries found with a seal that did not match (not used, replayed again)."""

    def key(self, kind: str, args: tuple[object, ...]) -> str | None:
        """The digest that names the answer of replay ``kind`` for ``args`` (None: the inputs
        have no stable digest, or the code's source is unknown, so nothing is stored)."""
        code = self._code()
        if not code:
            return None
        try:
            text = json.dumps([kind, canonical(args)], sort_keys=True, separators=(",", ":"))
        except Unkeyable:
            return None
        return hashlib.sha256(f"{code}\n{text}".encode()).hexdigest()[:32]

    def _load(self) -> dict[str, tuple[Answer, str]]:
        if self._entries is None:
            path = self._path()
            found = load_cache(path, "replay cache", check_store, max_bytes=MAX_BYTES)
            self._entries = found[1] if found is not None and found[0] == self._code() else {}
        return self._entries

    def get(self, key: str, kind: type[Answer] = int) -> Answer | None:
        """The stored answer named ``key`` whose seal matches and that is of type ``kind``
        (``int`` or ``tuple``), else None."""
        with self._lock:
            entries = self._load()
            found = entries.pop(key, None)
            if found is None:
                self.misses += 1
                return None
            value, seal = found
            if not isinstance(value, kind) or seal != _seal(self._code(), key, value):
                self.misses += 1
                self.rejected += 1
                self._dirty = True  # written back without it
                log.warning("mtpstudio: replay cache entry %s is not as stored; replayed.", key)
                return None
            entries[key] = found  # most recently used last
            self.hits += 1
            return value

    def put(self, key: str, value: Answer) -> None:
        if _answer(value if isinstance(value, int) else list(value)) is None:
            return
        with self._lock:
            entries = self._load()
            entries.pop(key, None)
            entries[key] = (value, _seal(self._code(), key, value))
            self._dirty = True

    def save(self) -> None:
        """Write the answers back when new ones came (the newest ``MAX_ENTRIES``); a cache
        that cannot be written is left as it was (said in the log)."""
        with self._lock:
            if not self._dirty or self._entries is None:
                return
            kept = list(self._entries.items())[-MAX_ENTRIES:]
            data = {
                "format": FORMAT,
                "code": self._code(),
                "entries": {key: [_plain(value), seal] for key, (value, seal) in kept},
            }
            try:
                write_text_atomic(self._path(), json.dumps(data, separators=(",", ":")))
            except WriteError as exc:
                log.warning("mtpstudio: the replay cache was not saved: %s", exc)
                return
            self._dirty = False


def _plain(value: Answer) -> int | list[int]:
    return value if isinstance(value, int) else list(value)


def _default_path() -> Path:
    return cache_dir() / CACHE_NAME


STORE = ReplayStore(_default_path)
"""The process's store; ``stored`` replays go through it, written back at exit."""
_saving = threading.Event()


def _save_at_exit() -> None:
    STORE.save()


def stored(kind: str, answer: type[A]) -> Callable[[Callable[P, A]], Callable[P, A]]:
    """Keep the answers (of type ``answer``) of replay function ``kind`` in ``STORE`` across
    runs (under an ``lru_cache``, which answers repeated calls within the run). The key holds
    the digest of the memory model's source and of the replay's own module."""

    def wrap(replay: Callable[P, A]) -> Callable[P, A]:
        module = replay.__module__

        @functools.wraps(replay)
        def cached(*args: P.args, **kwargs: P.kwargs) -> A:
            if kwargs or os.environ.get(DISABLE_ENV):
                return replay(*args, **kwargs)
            source = source_digest(module)
            key = STORE.key(f"{kind} {source}", args) if source else None
            if key is None:
                return replay(*args, **kwargs)
            found = STORE.get(key, answer)
            if isinstance(found, answer):
                return found
            value = replay(*args, **kwargs)
            STORE.put(key, value)
            if not _saving.is_set():
                _saving.set()
                atexit.register(_save_at_exit)
            return value

        return cached

    return wrap
