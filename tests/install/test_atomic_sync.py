"""core.atomic: temp file in the folder, fsync of the file and then of the folder."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mtpstudio.core.atomic import WriteError, write_text_atomic


def test_the_folder_is_synced_after_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        mode = os.fstat(fd).st_mode
        synced.append("dir" if stat.S_ISDIR(mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    target = tmp_path / "sub" / "file.txt"
    write_text_atomic(target, "hello\n", 0o600)
    assert synced == ["file", "dir"]
    assert target.read_text() == "hello\n" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in target.parent.iterdir()] == ["file.txt"]


def test_a_failed_write_leaves_no_temp_file(tmp_path: Path) -> None:
    folder = tmp_path / "blocked"
    folder.write_text("a file where a folder should be")
    with pytest.raises(WriteError, match="cannot write"):
        write_text_atomic(folder / "x.txt", "data")
