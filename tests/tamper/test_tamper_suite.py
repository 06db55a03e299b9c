"""Tamper-and-fault suite: each case attacks or breaks one thing and runs the real program.

Every case runs in its own throwaway root and HOME (``support.tamper.Sandbox``) and must end
the way its ``expected`` column says; on top of that no file may change outside the folders
mtpstudio writes, no process may be left behind and no output may hold a traceback. The suite
prints its table (case, expected, got) and the totals when the module is done.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.helper_bench import unit_files, unit_payload
from support.tamper import (
    SECRET,
    Row,
    Sandbox,
    changed_outside,
    render_table,
)

from mtpstudio.core.plan import plan_from_dict, save_plan

UNIT = "mtpstudio-llama.service"
MANIFEST = "var/lib/mtpstudio/manifest.json"
Outcome = tuple[bool, str]  # (the expectation held, what happened)


@dataclass(frozen=True)
class Case:
    name: str
    expected: str
    run: Callable[[Sandbox, Any], Outcome]
    needs_root: bool = False


CASES: dict[str, Case] = {}


def case(name: str, expected: str, *, needs_root: bool = False) -> Callable[..., Any]:
    def register(fn: Callable[[Sandbox, Any], Outcome]) -> Callable[[Sandbox, Any], Outcome]:
        CASES[name] = Case(name, expected, fn, needs_root)
        return fn

    return register


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------
# the helper's manifest (issue 27 items 1 and 8)


def installed_unit(box: Sandbox, *, over: bytes | None = None) -> dict[str, Any]:
    """A unit installed by the real helper (over an existing file when ``over``); the manifest."""
    if over is not None:
        target = box.root / "etc/systemd/system" / UNIT
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(over)
    ran = box.helper("install-unit", UNIT, payload=unit_payload())
    assert ran.returncode == 0, ran.stderr
    manifest: dict[str, Any] = json.loads((box.root / MANIFEST).read_text())
    return manifest


def write_manifest(box: Sandbox, data: object) -> None:
    path = box.root / MANIFEST
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


def entry(path: str, data: bytes, **extra: object) -> dict[str, object]:
    base: dict[str, object] = {
        "path": path, "sha256": sha(data), "size": len(data), "mode": 0o644, "backup": None,
        "backup_mode": None, "backup_owner": None, "replaces_sha256": None,
    }  # fmt: skip
    base.update(extra)
    return base


def forged(group: str, *files: dict[str, object], created: list[str] | None = None) -> object:
    return {
        "schema": 1,
        "groups": {group: {"installed_at": "2026-11-24T00:00:00+00:00", "files": list(files)}},
        "created_dirs": created or [],
    }


@case("manifest names /etc/passwd", "refused, passwd kept")
def _passwd(box: Sandbox, fx: Any) -> Outcome:
    passwd = box.root / "etc/passwd"
    passwd.parent.mkdir(parents=True, exist_ok=True)
    passwd.write_bytes(b"root:x:0:0::/root:/bin/sh\n")
    write_manifest(box, forged("unit:evil.service", entry("/etc/passwd", passwd.read_bytes())))
    box.settle()
    ran = box.helper("remove-unit", "evil.service")
    return ran.refused("refused", "/etc/passwd") and passwd.exists(), ran.line()


@case("manifest backup ../../outside, mode 4777", "refused, nothing copied")
def _backup_traversal(box: Sandbox, fx: Any) -> Outcome:
    target = "/etc/systemd/system/evil.service"
    write_manifest(box, forged("unit:evil.service", entry(
        target, b"x", backup="../../../../../outside/secret", backup_mode=0o4777,
        backup_owner=[0, 0])))  # fmt: skip
    ran = box.helper("remove-unit", "evil.service")
    copied = (box.root / target.lstrip("/")).exists()
    return ran.refused("refused", "backup") and not copied, ran.line()


@case("manifest backup outside, path /etc/victim2", "refused, nothing copied")
def _backup_outside_path(box: Sandbox, fx: Any) -> Outcome:
    write_manifest(box, forged("unit:evil.service", entry(
        "/etc/victim2", b"x", backup="../../../../../outside/secret", backup_mode=2559,
        backup_owner=[0, 0])))  # fmt: skip
    ran = box.helper("remove-unit", "evil.service")
    return ran.refused("refused") and not (box.root / "etc/victim2").exists(), ran.line()


@case("manifest restore with mode 4777", "refused, unit kept")
def _setuid_restore(box: Sandbox, fx: Any) -> Outcome:
    manifest = installed_unit(box, over=b"[Service]\nExecStart=/bin/old\n")
    for f in manifest["groups"][f"unit:{UNIT}"]["files"]:
        if f["backup"]:
            f["backup_mode"] = 0o4777
    write_manifest(box, manifest)
    ran = box.helper("remove-unit", UNIT)
    unit = (box.root / "etc/systemd/system" / UNIT).read_text()
    return ran.refused("refused", "mode") and "mtpstudio" in unit, ran.line()


@case("backup altered after install", "refused, unit kept")
def _backup_altered(box: Sandbox, fx: Any) -> Outcome:
    installed_unit(box, over=b"[Service]\nExecStart=/bin/old\n")
    backups = list((box.root / "var/lib/mtpstudio/backups").iterdir())
    assert len(backups) == 1
    backups[0].write_bytes(b"[Service]\nExecStart=/bin/sh -c 'evil'\n")
    ran = box.helper("remove-unit", UNIT)
    unit = (box.root / "etc/systemd/system" / UNIT).read_text()
    return ran.refused("refused", "hash") and "mtpstudio" in unit, ran.line()


@case("manifest created_dirs names srv/empty", "refused, folder kept")
def _created_dirs(box: Sandbox, fx: Any) -> Outcome:
    manifest = installed_unit(box)
    (box.root / "srv/empty").mkdir(parents=True)
    manifest["created_dirs"].append("srv/empty")
    write_manifest(box, manifest)
    box.settle()
    ran = box.helper("remove-unit", UNIT)
    return ran.refused("refused", "srv/empty") and (box.root / "srv/empty").is_dir(), ran.line()


@case("manifest claims a unit not mtpstudio's", "refused, unit kept")
def _foreign_unit(box: Sandbox, fx: Any) -> Outcome:
    sshd = box.root / "etc/systemd/system/sshd.service"
    sshd.parent.mkdir(parents=True)
    sshd.write_bytes(b"[Unit]\nDescription=OpenBSD Secure Shell server\n[Service]\n"
                     b"ExecStart=/usr/sbin/sshd -D\n")  # fmt: skip
    write_manifest(box, forged("unit:sshd.service", entry(
        "/etc/systemd/system/sshd.service", sshd.read_bytes())))  # fmt: skip
    box.settle()
    ran = box.helper("remove-unit", "sshd.service")
    return ran.refused("refused", "not a file mtpstudio installs") and sshd.exists(), ran.line()


@case("manifest groups: [] (helper, status, revert all)", "one line each, no KeyError")
def _wrong_shape(box: Sandbox, fx: Any) -> Outcome:
    installed_unit(box)
    write_manifest(box, {"schema": 1, "groups": [], "created_dirs": []})
    runs = [box.helper("status"), box.helper("remove-unit", UNIT),
            box.cli("status", "--root", str(box.root)),
            box.cli("revert", "all", "--root", str(box.root))]  # fmt: skip
    ok = all(r.refused("manifest") for r in runs)
    return ok, " | ".join(r.line()[:60] for r in runs[::3])


@case("manifest file entry without 'backup'", "refused, no KeyError")
def _missing_key(box: Sandbox, fx: Any) -> Outcome:
    manifest = installed_unit(box)
    del manifest["groups"][f"unit:{UNIT}"]["files"][0]["backup"]
    write_manifest(box, manifest)
    ran = box.helper("remove-unit", UNIT)
    return ran.refused("refused", "manifest") and "KeyError" not in ran.stderr, ran.line()


@case("manifest of 100000 nested [", "refused in one line")
def _deep_manifest(box: Sandbox, fx: Any) -> Outcome:
    write_manifest(box, "[" * 100_000)
    ran = box.helper("status")
    return ran.refused("refused", "manifest"), ran.line()


@case("manifest of 2 MiB", "refused in one line")
def _big_manifest(box: Sandbox, fx: Any) -> Outcome:
    manifest = installed_unit(box)
    manifest["padding"] = "x" * (2 * 1024 * 1024)
    write_manifest(box, manifest)
    ran = box.helper("remove-unit", UNIT)
    return ran.refused("refused", "manifest"), ran.line()


@case("manifest is a symlink to a secret", "refused, secret unread")
def _manifest_link(box: Sandbox, fx: Any) -> Outcome:
    path = box.root / MANIFEST
    path.parent.mkdir(parents=True)
    path.symlink_to(box.secret)
    ran = box.helper("status")
    return ran.refused("symbolic link") and SECRET.decode() not in ran.stderr, ran.line()


# ---------------------------------------------------------------------------------------------
# units the helper installs (item 2) and what already held


def unit_with(old: str, new: str) -> bytes:
    text = unit_files()["unit"].text
    assert old in text
    return unit_payload(unit=text.replace(old, new))


for _spec in ("%U", "%u", "%i", "%g", "0", "root"):

    @case(f"unit User={_spec}", "refused")
    def _user_spec(box: Sandbox, fx: Any, spec: str = _spec) -> Outcome:
        ran = box.helper("install-unit", UNIT, payload=unit_with("User=alice", f"User={spec}"))
        return ran.refused("refused", "User=") or ran.refused("root"), ran.line()


@case("template unit h@.service with User=%i", "refused")
def _template(box: Sandbox, fx: Any) -> Outcome:
    ran = box.helper("install-unit", "h@.service", payload=unit_with("User=alice", "User=%i"))
    return ran.refused("refused", "template"), ran.line()


@case("instance unit h@root.service", "refused")
def _instance(box: Sandbox, fx: Any) -> Outcome:
    ran = box.helper("install-unit", "h@root.service", payload=unit_payload())
    return ran.refused("refused", "template"), ran.line()


@case("unit Environment=LD_PRELOAD=…", "refused")
def _unit_ld_preload(box: Sandbox, fx: Any) -> Outcome:
    payload = unit_with("Environment=CUDA_CACHE_PATH", 'Environment="LD_PRELOAD=/tmp/x.so" '
                        "CUDA_CACHE_PATH")  # fmt: skip
    ran = box.helper("install-unit", UNIT, payload=payload)
    return ran.refused("refused", "LD_PRELOAD"), ran.line()


@case("unit SupplementaryGroups=disk", "refused")
def _unit_disk_group(box: Sandbox, fx: Any) -> Outcome:
    ran = box.helper("install-unit", UNIT, payload=unit_with("video render", "video disk"))
    return ran.refused("refused", "SupplementaryGroups"), ran.line()


@case("env file LD_PRELOAD (held)", "refused")
def _env_ld(box: Sandbox, fx: Any) -> Outcome:
    env = unit_files()["env"].text + 'LD_PRELOAD="/tmp/evil.so"\n'
    ran = box.helper("install-unit", UNIT, payload=unit_payload(env=env))
    return ran.refused("refused", "LD_PRELOAD"), ran.line()


@case("NAME ../../etc/passwd (held)", "refused")
def _traversal_name(box: Sandbox, fx: Any) -> Outcome:
    ran = box.helper("install-unit", "../../etc/passwd.service", payload=unit_payload())
    return ran.refused("not an accepted name"), ran.line()


@case("unit folder is a symlink outside (held)", "refused, nothing written")
def _unit_dir_link(box: Sandbox, fx: Any) -> Outcome:
    (box.root / "etc/systemd").mkdir(parents=True)
    (box.root / "etc/systemd/system").symlink_to(box.outside)
    ran = box.helper("install-unit", UNIT, payload=unit_payload())
    return ran.refused("symbolic link") and len(list(box.outside.iterdir())) == 1, ran.line()


@case("input of 100000 nested [ (held)", "refused in one line")
def _deep_input(box: Sandbox, fx: Any) -> Outcome:
    ran = box.helper("install-unit", UNIT, payload=b"[" * 100_000)
    return ran.refused("refused", "JSON"), ran.line()


# ---------------------------------------------------------------------------------------------
# apply --dry-run previews (item 5) and a full disk (item 6)


def plan_file(box: Sandbox) -> Path:
    binary = box.work / "llama-server"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    plan = plan_from_dict({"model": {"card": "qwen3.6-35b-a3b-iq4_xs"},
                           "engine": {"binary": str(binary)}})  # fmt: skip
    path = box.work / "plan.json"
    save_plan(plan, path)
    return path


def dry_run_unit(box: Sandbox) -> Any:
    return box.cli("apply", "unit", "--plan", str(plan_file(box)), "--system", "--account",
                   "alice", "--root", str(box.root), "--dry-run", timeout=60)  # fmt: skip


@case("apply unit --dry-run with a FIFO at the target", "finishes, says so")
def _dry_run_fifo(box: Sandbox, fx: Any) -> Outcome:
    target = box.root / "etc/systemd/system" / UNIT
    target.parent.mkdir(parents=True)
    os.mkfifo(target)
    ran = dry_run_unit(box)
    return ran.returncode == 0 and "not a regular file" in ran.stdout, ran.line()


@case("apply unit --dry-run, target links to a secret", "finishes, secret unread")
def _dry_run_link(box: Sandbox, fx: Any) -> Outcome:
    target = box.root / "etc/systemd/system" / UNIT
    target.parent.mkdir(parents=True)
    target.symlink_to(box.secret)
    ran = dry_run_unit(box)
    leaked = SECRET.decode().strip() in ran.stdout
    return ran.returncode == 0 and "symbolic link" in ran.stdout and not leaked, ran.line()


@case("disk full (64 KiB tmpfs, 11 KB unit)", "failed, nothing recorded", needs_root=True)
def _disk_full(box: Sandbox, fx: Any) -> Outcome:
    small = box.root
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)], check=True)
    try:
        (small / "var/lib").mkdir(parents=True)
        (small / "filler").write_bytes(b"0" * (60 * 1024))
        big = unit_files()["unit"].text.replace("[Install]", "#" + "x" * 9000 + "\n[Install]")
        ran = box.helper("install-unit", UNIT, payload=unit_payload(unit=big))
        status = box.helper("status")
        groups = json.loads(status.stdout)["groups"] if status.returncode == 0 else None
        ok = ran.refused("failed", "No space left", "nothing was changed") and groups == {}
        return ok, f"{ran.line()}; status groups {groups}"
    finally:
        subprocess.run(["umount", str(small)], check=True)


# ---------------------------------------------------------------------------------------------
# the runner and the table


@pytest.fixture(scope="module")
def table(request: pytest.FixtureRequest) -> Iterator[list[Row]]:
    rows: list[Row] = []
    yield rows
    if rows:
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        text = "\ntamper-and-fault suite\n" + render_table(rows)
        if reporter is not None:
            reporter.write_line(text)
        else:
            print(text)


class Fixtures:
    """Fixtures a case asks for only when it needs them (engines, tiny models)."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request

    def __getattr__(self, name: str) -> Any:
        return self._request.getfixturevalue(name)


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str, tmp_path: Path, table: list[Row], request: pytest.FixtureRequest) -> None:
    c = CASES[name]
    if c.needs_root and os.geteuid() != 0:
        table.append(Row(name, c.expected, "not run here: needs root", True, 0, 0, 0))
        pytest.skip("needs root (mounts a tmpfs)")
    engines = os.environ["MTPSTUDIO_ENGINE_CACHE"]  # set by the autouse XDG fixture
    box = Sandbox(tmp_path / "box", f"{name}-{os.getpid()}", engines)
    try:
        held, got = c.run(box, Fixtures(request))
    except AssertionError as exc:
        held, got = False, f"the case itself failed: {exc}"
    got = got.replace(str(box.base), "…")
    outside = changed_outside(box.before, box.tree())
    leftover = box.leftovers()
    tracebacks = [r for r in box.runs if r.traceback]
    row = Row(name, c.expected, got, held, len(outside), len(leftover), len(tracebacks))
    table.append(row)
    assert row.passed, {"got": got, "changed outside": outside, "left running": leftover,
                        "tracebacks": [r.stderr[-2000:] for r in tracebacks]}  # fmt: skip
