"""mtpstudio's own JSON files read back: size and depth limits, a schema, damaged caches set aside.

Plans, settings, the engine-probe cache, stored measurements and server records are all read
through ``read_json``: nothing but a regular file (a FIFO at the path never blocks), at most
``max_bytes``, UTF-8 JSON nested at most ``max_depth`` deep, every number readable (Python
refuses integers of more than 4,300 digits). A file that breaks a rule raises
``StateFileError`` naming the file in one sentence. Where the file is a cache (probes,
measurements, window state, server records) ``load_cache`` moves it aside as
``NAME.bad-STAMP`` and says so in one logged sentence, so it is rebuilt and nothing is lost.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from mtpstudio.core.errors import MtpStudioError

log = logging.getLogger(__name__)

MAX_DEPTH = 32
"""Deeper than anything mtpstudio writes (a plan is 3 levels, a measurement store 6)."""

T = TypeVar("T")


class StateFileError(MtpStudioError):
    """A file mtpstudio reads back is not what it writes (the message names it)."""


class SchemaError(ValueError):
    """Raised by a ``check`` function: the JSON parses but is not of the expected shape."""


def depth(value: Any) -> int:
    """How deeply lists and objects nest in a parsed JSON value (a scalar is 0)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        todo.extend((child, level + 1) for child in children)
    return deepest


def _read_bounded(path: Path, what: str, max_bytes: int) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            return None
        raise StateFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StateFileError(f"{what} {path} is not a regular file")
        chunks, size = [], 0
        while size <= max_bytes and (chunk := os.read(fd, 1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise StateFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise StateFileError(f"{what} {path} is larger than {max_bytes // 1024} KiB")
    return b"".join(chunks)


def parse_json(data: bytes | str, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """JSON text parsed with a depth limit; StateFileError (naming ``what``) otherwise."""
    try:
        value = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
    except UnicodeDecodeError:
        raise StateFileError(f"{what} is not UTF-8 text") from None
    except RecursionError:
        raise StateFileError(f"{what} is nested too deeply to be mtpstudio's") from None
    except json.JSONDecodeError as exc:
        raise StateFileError(
            f"{what} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except ValueError:  # e.g. an integer of more digits than Python converts (4,300)
        raise StateFileError(f"{what} holds a number mtpstudio cannot read") from None
    if depth(value) > max_depth:
        raise StateFileError(f"{what} is nested too deeply to be mtpstudio's")
    return value


def read_json(path: Path, what: str, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """The parsed content of ``path``, or None when there is no such file.

    Raises:
        StateFileError: not a regular file, too large, not UTF-8 JSON, or nested too deeply.
    """
    raw = _read_bounded(path, what, max_bytes)
    if raw is None:
        return None
    return parse_json(raw, f"{what} {path}", max_depth)


def set_aside(path: Path) -> Path | None:
    """Rename a damaged file to ``NAME.bad-YYYYmmdd-HHMMSS`` (kept for a look); its new path."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.bad-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.bad-{stamp}.{n}")
    try:
        path.rename(target)
    except OSError:
        return None
    return target


def load_cache(
    path: Path,
    what: str,
    check: Callable[[Any], T],
    *,
    max_bytes: int,
    max_depth: int = MAX_DEPTH,
) -> T | None:
    """A cache file checked by ``check`` (which raises SchemaError for the wrong shape).

    None when it is missing, or when it is damaged: then it is set aside and one sentence
    saying so is logged, and the caller rebuilds it.
    """
    try:
        data = read_json(path, what, max_bytes=max_bytes, max_depth=max_depth)
        return None if data is None else check(data)
    except (StateFileError, SchemaError) as exc:
        why = str(exc) if isinstance(exc, StateFileError) else f"{what} {path} {exc}"
    moved = set_aside(path)
    where = f"moved to {moved.name}" if moved is not None else "left in place"
    log.warning("mtpstudio: %s; %s, it will be rebuilt.", why, where)
    return None
