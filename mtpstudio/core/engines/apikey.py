"""The server's API key: generated with ``secrets``, kept in a user-only (0600) file.

The key file holds the key on one line and nothing else, so both engines can read it with
``--api-key-file`` (ik_llama.cpp would take a comment line for a second key). It lives in
``$XDG_CONFIG_HOME/mtpstudio/`` (folder 0700). ``ensure_api_key`` says whether it created the
key, so the caller shows a new key once and afterwards only says where it is.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from mtpstudio.core.atomic import write_text_atomic
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.paths import config_dir

__all__ = [
    "KEY_FILE_NAME",
    "ApiKey",
    "ApiKeyError",
    "default_key_path",
    "ensure_api_key",
    "generate_api_key",
    "read_api_key",
    "replace_api_key",
    "store_api_key",
]

KEY_FILE_NAME = "server-api-key"
KEY_PREFIX = "mtps-"
_KEY_MODE = 0o600
_DIR_MODE = 0o700


class ApiKeyError(MtpStudioError):
    """The API key file cannot be read, is unsafe, or cannot be written."""


@dataclass(frozen=True)
class ApiKey:
    """A key and its file; ``created`` is True only when this call made the key."""

    key: str
    path: Path
    created: bool

    def __repr__(self) -> str:  # never print the key by accident
        return f"ApiKey(path={self.path!r}, created={self.created})"


def default_key_path() -> Path:
    """``$XDG_CONFIG_HOME/mtpstudio/server-api-key``."""
    return config_dir() / KEY_FILE_NAME


def generate_api_key() -> str:
    """A new random key: 256 bits, URL-safe, with a recognisable prefix."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


MAX_KEY_FILE_BYTES = 4096


def _read_key_file(path: Path) -> tuple[os.stat_result, bytes]:
    """Stat and bytes of a regular file of at most 4 KiB (a FIFO never blocks the read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise ApiKeyError(f"the API key file {path} does not exist") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ApiKeyError(
                f"the API key file {path} is a symbolic link; mtpstudio reads keys only from "
                "files themselves",
                hint="Point server.api_key_file at the file the link names.",
            ) from None
        raise ApiKeyError(f"cannot read the API key file {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ApiKeyError(f"the API key file {path} is not a regular file")
        data = os.read(fd, MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise ApiKeyError(f"cannot read the API key file {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return info, data


def read_api_key(path: Path) -> str:
    """The key stored at ``path``; the file must be the user's own and not readable by others.

    The shape is checked before the permissions, so advice to ``chmod`` a file is only given
    for a file that holds one key and nothing else; a file elsewhere than mtpstudio's own key
    file is never suggested for removal.

    Raises:
        ApiKeyError: the file is missing, not a regular file, larger than 4 KiB, unsafe
            (group/other permissions, other owner), empty, or holds more than one line.
    """
    ours = path == default_key_path()
    elsewhere = (
        "Remove it; mtpstudio will generate a new key."
        if ours
        else "Point server.api_key_file at a file that holds only your key "
        "(mtpstudio plan --api-key-file FILE)."
    )
    info, data = _read_key_file(path)
    if len(data) > MAX_KEY_FILE_BYTES:
        raise ApiKeyError(f"the API key file {path} is larger than 4 KiB", hint=elsewhere)
    if info.st_uid != os.geteuid():
        raise ApiKeyError(f"the API key file {path} belongs to another user", hint=elsewhere)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1 or any(c.isspace() for c in lines[0]):
        raise ApiKeyError(
            f"the API key file {path} must hold exactly one key on one line", hint=elsewhere
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise ApiKeyError(
            f"the API key file {path} can be read by other users "
            f"(mode {stat.S_IMODE(info.st_mode):04o})",
            hint=f"Run `chmod 600 {path}`, or replace the key since others may have seen it.",
        )
    return lines[0]


def _write_key(path: Path, key: str) -> None:
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=_DIR_MODE)
    except OSError as exc:
        raise ApiKeyError(f"cannot create {folder}: {exc.strerror or exc}") from None
    write_text_atomic(path, key + "\n", mode=_KEY_MODE)


def ensure_api_key(path: Path | None = None) -> ApiKey:
    """The stored key, or a new one written to ``path`` (default ``default_key_path()``).

    Raises:
        ApiKeyError: an existing file is unsafe or malformed (it is never overwritten
            silently), or a new one cannot be written.
    """
    target = path or default_key_path()
    if target.exists():
        return ApiKey(read_api_key(target), target, created=False)
    key = generate_api_key()
    _write_key(target, key)
    return ApiKey(key, target, created=True)


def replace_api_key(path: Path | None = None) -> ApiKey:
    """Write a fresh key over the old one (clients must then use the new key)."""
    target = path or default_key_path()
    key = generate_api_key()
    _write_key(target, key)
    return ApiKey(key, target, created=True)


def store_api_key(path: Path, key: str) -> ApiKey:
    """Write a key the user chose to ``path`` (0600, folder 0700), replacing what was there.

    Raises:
        ApiKeyError: the key is empty or holds whitespace, or the file cannot be written.
    """
    if not key or any(c.isspace() for c in key):
        raise ApiKeyError("the API key must be non-empty and contain no spaces")
    _write_key(path, key)
    return ApiKey(key, path, created=True)


def plan_api_key(key_file: Path | str | None) -> str | None:
    """The key a server started from a plan asks for (read from the plan's key file), if any."""
    return None if key_file is None else read_api_key(Path(key_file))
