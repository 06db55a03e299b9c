"""SIGKILL the real helper at every step of a write: old file intact or new one complete.

A traced run lists the steps (``MTPSTUDIO_HELPER_TRACE``); then, for each step N, a fresh copy
of the tree gets a run killed at step N (``MTPSTUDIO_HELPER_FAULT=kill@N``). Each target must
hold its old bytes (or be absent if it was absent) or the complete new bytes, and a following
``remove-session`` must leave the tree byte-identical to the one before the first install.
Also: ENOSPC injected mid-write, and a real full tmpfs when running as root.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.helper_bench import (
    SESSION,
    WAYLAND_DIR,
    make_root,
    run_helper,
    session_files,
    session_payload,
    snapshot,
    temp_files,
    trace_points,
)

from mtpstudio.core.desktop.session_files import SessionVariant
from mtpstudio.helper.constants import WRAPPER_DIR

OLD_DESKTOP = b"[Desktop Entry]\nType=Application\nName=Someone else's session\nExec=/bin/true\n"
VRAM = {"desktop_mib": 1024}


@dataclass
class SweepFigures:
    points: int = 0
    partial: int = 0
    missing: int = 0
    not_restored: int = 0
    leftovers: int = 0

    def add(self, other: SweepFigures) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def targets() -> dict[str, str]:
    files = session_files()
    return {
        "wrapper": f"{WRAPPER_DIR}/{files['wrapper'].name}".lstrip("/"),
        "desktop": f"{WAYLAND_DIR}/{SESSION}".lstrip("/"),
        "vram": "var/lib/mtpstudio/desktop-vram-plasmawayland-llvmpipe-mtpstudio.json",
    }


def read(root: Path, rel: str) -> bytes | None:
    path = root / rel
    return path.read_bytes() if path.is_file() else None


def sweep(
    start: Path,
    args: list[str],
    payload: bytes,
    allowed: dict[str, set[bytes | None]],
    original: dict[str, object],
    tmp: Path,
) -> SweepFigures:
    """Kill a run of ``args`` at each of its steps; check the targets, then revert."""
    probe = tmp / "probe"
    shutil.copytree(start, probe, symlinks=True)
    steps = trace_points(probe, args, payload, tmp / "trace")
    figures = SweepFigures()
    for n in range(1, len(steps) + 1):
        work = tmp / f"kill-{n}"
        shutil.copytree(start, work, symlinks=True)
        killed = run_helper(work, *args, payload=payload,
                            env={"MTPSTUDIO_HELPER_FAULT": f"kill@{n}"})  # fmt: skip
        assert killed.returncode == -9, (n, steps[n - 1], killed.stderr)
        figures.points += 1
        for rel, states in allowed.items():
            now = read(work, rel)
            if now is None and None not in states:
                figures.missing += 1
            elif now is not None and now not in states:
                figures.partial += 1
        reverted = run_helper(work, "remove-session", SESSION)
        assert reverted.returncode in (0, 2), reverted.stderr
        if reverted.returncode == 2:
            assert b"has not installed" in reverted.stderr
        if snapshot(work) != original:
            figures.not_restored += 1
        figures.leftovers += len(temp_files(work))
        shutil.rmtree(work)
    return figures


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """A root where someone else's session file already sits at the target path."""
    root = make_root(tmp_path / "base", plasma=True)
    desktop = root / targets()["desktop"]
    desktop.parent.mkdir(parents=True)
    desktop.write_bytes(OLD_DESKTOP)
    return root


@pytest.mark.slow
def test_sigkill_at_every_step_leaves_old_or_new_never_partial(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = snapshot(base)
    t = targets()
    new1 = session_payload(vram=VRAM)
    files = session_files()
    wrapper1, desktop1 = files["wrapper"].text.encode(), files["desktop"].text.encode()
    total = SweepFigures()

    # 1. install over a pre-existing file
    allowed: dict[str, set[bytes | None]] = {
        t["wrapper"]: {None, wrapper1},
        t["desktop"]: {OLD_DESKTOP, desktop1},
    }
    install = sweep(base, ["install-session", SESSION], new1, allowed, original, tmp_path / "a")
    total.add(install)

    # 2. reinstall a changed session over mtpstudio's own
    installed = tmp_path / "installed"
    shutil.copytree(base, installed, symlinks=True)
    assert run_helper(installed, "install-session", SESSION, payload=new1).returncode == 0
    new2 = session_payload(vram=VRAM, llvmpipe_threads=4)  # the wrapper changes
    wrapper2 = wrapper1.replace(
        b"export GALLIUM_DRIVER=llvmpipe\n",
        b"export GALLIUM_DRIVER=llvmpipe\nexport LP_NUM_THREADS=4\n",
    )
    assert wrapper2 != wrapper1
    allowed = {t["wrapper"]: {wrapper1, wrapper2}, t["desktop"]: {desktop1}}
    again = sweep(installed, ["install-session", SESSION], new2, allowed, original, tmp_path / "b")
    total.add(again)

    # 3. revert: every step of remove-session
    allowed = {t["wrapper"]: {None, wrapper1}, t["desktop"]: {OLD_DESKTOP, desktop1}}
    revert = sweep(installed, ["remove-session", SESSION], b"", allowed, original, tmp_path / "c")
    total.add(revert)

    with capsys.disabled():
        print(
            f"\nhelper fault injection: {total.points} kill points exercised "
            f"(install {install.points}, reinstall {again.points}, revert {revert.points}); "
            f"partial files {total.partial}, missing files {total.missing}, "
            f"trees not restored by revert {total.not_restored}, temp files left {total.leftovers}"
        )
    assert install.points > 20 and again.points > 10 and revert.points > 10
    assert (total.partial, total.missing, total.not_restored, total.leftovers) == (0, 0, 0, 0)


@pytest.mark.parametrize(
    "where",
    ["temp-half-written#1", "temp-half-written#2", "temp-half-written#3", "temp-half-written#4",
     "temp-written#4", "temp-synced#5", "before-rename#4"],
)  # fmt: skip
def test_enospc_mid_write_fails_cleanly(base: Path, where: str) -> None:
    """Writes in order: backup, manifest, wrapper, session file, measurement."""
    before = snapshot(base)
    result = run_helper(
        base,
        "install-session",
        SESSION,
        payload=session_payload(vram=VRAM),
        env={"MTPSTUDIO_HELPER_FAULT": f"enospc@{where}"},
    )
    assert result.returncode == 1
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0]
    assert snapshot(base) == before  # the failed install put everything back
    again = run_helper(base, "install-session", SESSION, payload=session_payload(vram=VRAM))
    assert again.returncode == 0, again.stderr
    assert run_helper(base, "remove-session", SESSION).returncode == 0
    assert snapshot(base) == before


def test_a_really_full_disk(tmp_path: Path) -> None:
    """A 64 KiB tmpfs as the root and a 200 KiB unit (long flag notes): ENOSPC from the
    kernel."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the injected ENOSPC test covers the logic")
    root = tmp_path / "small"
    root.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(root)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        make_root(root, plasma=True)
        desktop = root / targets()["desktop"]
        desktop.parent.mkdir(parents=True)
        desktop.write_bytes(OLD_DESKTOP)
        before = snapshot(root)
        from support.helper_bench import unit_payload

        notes = [["-m", "x" * 1900]] * 105
        result = run_helper(root, "install-unit", "mtpstudio-llama.service",
                            payload=unit_payload(notes=notes))  # fmt: skip
        assert result.returncode == 1, result.stderr
        assert os.strerror(errno.ENOSPC) in result.stderr.decode()
        assert snapshot(root) == before
    finally:
        subprocess.run(["umount", str(root)], check=False)


def test_variants_install_side_by_side(base: Path) -> None:
    for variant in (SessionVariant.WAYLAND_LLVMPIPE, SessionVariant.X11_LLVMPIPE):
        name = session_files(variant)["desktop"].name
        result = run_helper(base, "install-session", name, payload=session_payload(variant))
        assert result.returncode == 0, result.stderr
    assert (base / "usr/local/share/xsessions/plasmax11-llvmpipe-mtpstudio.desktop").is_file()


def test_a_disk_that_stays_full_while_rolling_back(tmp_path: Path) -> None:
    """ENOSPC at the unit's write and again at the next write (where putting the manifest back
    would write): the install stages every byte first, so the rollback writes nothing."""
    from support.helper_bench import unit_payload

    root = make_root(tmp_path / "root", plasma=True)
    before = snapshot(root)
    faults = "enospc@temp-half-written#3,enospc@temp-half-written#4"
    result = run_helper(root, "install-unit", "mtpstudio-llama.service", payload=unit_payload(),
                        env={"MTPSTUDIO_HELPER_FAULT": faults})  # fmt: skip
    assert result.returncode == 1
    [line] = result.stderr.decode().splitlines()
    assert "No space left on device" in line and line.endswith("nothing was changed")
    assert snapshot(root) == before  # no manifest keeping a group, no stray file
    status = run_helper(root, "status")
    assert json.loads(status.stdout)["groups"] == {}
