"""The server API key: generated once, stored 0600 in the XDG config dir, never overwritten."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mtpstudio.core.engines.apikey import (
    KEY_PREFIX,
    ApiKeyError,
    default_key_path,
    ensure_api_key,
    generate_api_key,
    read_api_key,
    replace_api_key,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_default_path_is_in_the_xdg_config_dir() -> None:
    assert default_key_path() == Path(os.environ["XDG_CONFIG_HOME"]) / "mtpstudio" / (
        "server-api-key"
    )


def test_created_once_with_user_only_permissions(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "mtpstudio" / "server-api-key"
    first = ensure_api_key(path)
    assert first.created and first.path == path
    assert first.key.startswith(KEY_PREFIX) and len(first.key) > 40
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700
    assert path.read_text() == first.key + "\n"  # one line: both engines' --api-key-file
    again = ensure_api_key(path)
    assert not again.created and again.key == first.key
    assert first.key not in repr(first)


def test_keys_are_random() -> None:
    assert len({generate_api_key() for _ in range(50)}) == 50


def test_replace_writes_a_new_key(tmp_path: Path) -> None:
    path = tmp_path / "k"
    old = ensure_api_key(path).key
    new = replace_api_key(path)
    assert new.key != old and read_api_key(path) == new.key and mode(path) == 0o600


def test_an_unsafe_file_is_refused_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_text("mtps-abc\n")
    path.chmod(0o644)
    with pytest.raises(ApiKeyError, match="can be read by other users") as info:
        ensure_api_key(path)
    assert "chmod 600" in (info.value.hint or "")
    assert path.read_text() == "mtps-abc\n"


@pytest.mark.parametrize("text", ["", "\n\n", "a\nb\n", "two words\n"])
def test_malformed_files_are_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "k"
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(ApiKeyError, match="exactly one key"):
        read_api_key(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ApiKeyError, match="does not exist"):
        read_api_key(tmp_path / "nope")
