"""Tamper-and-fault suite: each case attacks or breaks one thing and runs the real program.

Every case runs in its own throwaway root and HOME (``support.tamper.Sandbox``) and must end
the way its ``expected`` column says; on top of that no file may change outside the folders
mtpstudio writes, no process may be left behind and no output may hold a traceback. The suite
prints its table (case, expected, got) and the totals when the module is done.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.helper_bench import session_payload, unit_files, unit_payload
from support.tamper import (
    SECRET,
    Row,
    Sandbox,
    changed_outside,
    render_table,
)

from devkit.zero_gguf import zero_gguf_for_card
from mtpstudio.core.plan.io import plan_from_dict, save_plan

UNIT = "mtpstudio-llama.service"
MANIFEST = "var/lib/mtpstudio/manifest.json"
Outcome = tuple[bool, str]  # (the expectation held, what happened)


@dataclass(frozen=True)
class Case:
    name: str
    expected: str
    run: Callable[[Sandbox, Any], Outcome]
    needs_root: bool = False
    engine: bool = False  # runs the real llama-server builds


CASES: dict[str, Case] = {}


def case(
    name: str, expected: str, *, needs_root: bool = False, engine: bool = False
) -> Callable[..., Any]:
    def register(fn: Callable[[Sandbox, Any], Outcome]) -> Callable[[Sandbox, Any], Outcome]:
        CASES[name] = Case(name, expected, fn, needs_root, engine)
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
    installed_unit(box, over=b"[Service]\nExecStart=/bin/old\n")  # backups/ exists
    write_manifest(box, forged("unit:evil.service", entry(
        target, b"x", backup="../../../../../outside/secret", backup_mode=0o4777,
        backup_owner=[0, 0])))  # fmt: skip
    ran = box.helper("remove-unit", "evil.service")
    copied = (box.root / target.lstrip("/")).exists()
    return ran.refused("refused", "backup") and not copied, ran.line()


@case("manifest backup outside, path /etc/victim2", "refused, nothing copied")
def _backup_outside_path(box: Sandbox, fx: Any) -> Outcome:
    installed_unit(box, over=b"[Service]\nExecStart=/bin/old\n")  # backups/ exists
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


@case("manifest groups: [] (helper, status, revert all)", "refused in one line each")
def _wrong_shape(box: Sandbox, fx: Any) -> Outcome:
    installed_unit(box)
    write_manifest(box, {"schema": 1, "groups": [], "created_dirs": []})
    runs = [box.helper("status"), box.helper("remove-unit", UNIT),
            box.cli("status", "--root", str(box.root)),
            box.cli("revert", "all", "--root", str(box.root))]  # fmt: skip
    ok = all(r.refused("manifest") for r in runs)
    return ok, " | ".join(r.line().replace(str(box.base), "…")[:70] for r in runs[::3])


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


for _spec in ("%U", "%u", "%i", "%g", "0", "root"):

    @case(f"unit User={_spec}", "refused")
    def _user_spec(box: Sandbox, fx: Any, spec: str = _spec) -> Outcome:
        ran = box.helper("install-unit", UNIT, payload=unit_payload(user=spec))
        return ran.refused("refused", "User=") or ran.refused("root"), ran.line()


@case("template unit h@.service with User=%i", "refused")
def _template(box: Sandbox, fx: Any) -> Outcome:
    ran = box.helper("install-unit", "h@.service", payload=unit_payload(user="%i"))
    return ran.refused("refused", "template"), ran.line()


@case("instance unit h@root.service", "refused")
def _instance(box: Sandbox, fx: Any) -> Outcome:
    ran = box.helper("install-unit", "h@root.service", payload=unit_payload())
    return ran.refused("refused", "template"), ran.line()


@case("unit Environment=LD_PRELOAD=…", "refused")
def _unit_ld_preload(box: Sandbox, fx: Any) -> Outcome:
    payload = unit_payload(env=[["LD_PRELOAD", "/tmp/x.so"], ["CUDA_CACHE_PATH", "/x"]])
    ran = box.helper("install-unit", UNIT, payload=payload)
    return ran.refused("refused", "LD_PRELOAD"), ran.line()


@case("unit SupplementaryGroups=disk", "refused")
def _unit_disk_group(box: Sandbox, fx: Any) -> Outcome:
    ran = box.helper("install-unit", UNIT, payload=unit_payload(supplementary_groups="disk"))
    return ran.refused("refused", "does not take"), ran.line()


@case("unit AmbientCapabilities=CAP_SYS_ADMIN", "refused")
def _ambient_caps(box: Sandbox, fx: Any) -> Outcome:
    payload = unit_payload(ambient_capabilities="CAP_SYS_ADMIN")
    ran = box.helper("install-unit", UNIT, payload=payload)
    return ran.refused("refused", "does not take"), ran.line()


@case("env file LD_PRELOAD (held)", "refused")
def _env_ld(box: Sandbox, fx: Any) -> Outcome:
    ran = box.helper("install-unit", UNIT, payload=unit_payload(env=[["LD_PRELOAD", "/e.so"]]))
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
    # a unit is only written for a model file: the card's full-size zero-weight GGUF (sparse)
    model = zero_gguf_for_card("qwen3.6-35b-a3b-iq4_xs", box.work / "Qwen3.6-35B-A3B-IQ4_XS.gguf")
    plan = plan_from_dict({"model": {"path": str(model), "card": None},
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
    said = [line.strip() for line in ran.stdout.splitlines() if UNIT in line][:1]
    return ran.returncode == 0 and "not a regular file" in ran.stdout, ran.line() + f"; {said}"


@case("apply unit --dry-run, target links to a secret", "finishes, secret unread")
def _dry_run_link(box: Sandbox, fx: Any) -> Outcome:
    target = box.root / "etc/systemd/system" / UNIT
    target.parent.mkdir(parents=True)
    target.symlink_to(box.secret)
    ran = dry_run_unit(box)
    leaked = SECRET.decode().strip() in ran.stdout
    said = [line.strip() for line in ran.stdout.splitlines() if UNIT in line][:1]
    ok = ran.returncode == 0 and "symbolic link" in ran.stdout and not leaked
    return ok, ran.line() + f"; {said}"


@case(
    "disk full (64 KiB tmpfs, 11 KB unit)", "refused by the disk: nothing recorded", needs_root=True
)
def _disk_full(box: Sandbox, fx: Any) -> Outcome:
    small = box.root
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)], check=True)
    try:
        (small / "var/lib").mkdir(parents=True)
        (small / "filler").write_bytes(b"0" * (60 * 1024))
        big = unit_payload(notes=[["-m", "x" * 1800]] * 5)  # an 11 KB unit
        ran = box.helper("install-unit", UNIT, payload=big)
        status = box.helper("status")
        groups = json.loads(status.stdout)["groups"] if status.returncode == 0 else None
        ok = ran.refused("failed", "No space left", "nothing was changed") and groups == {}
        (small / "filler").write_bytes(b"0" * (62 * 1024))
        cli = box.cli("apply", "unit", "--plan", str(plan_file(box)), "--system", "--account",
                      "alice", "--root", str(small))  # fmt: skip
        ok &= cli.refused("nothing was changed", "Fix the cause") and "half" not in cli.stderr
        return ok, f"{ran.line()}; status groups {groups}; CLI: {cli.line()[-60:]}"
    finally:
        subprocess.run(["umount", str(small)], check=True)


# ---------------------------------------------------------------------------------------------
# servers: killing launch before it is healthy (item 3), state records (item 4)


def engine_plan(box: Sandbox, fx: Any, *, binary: Path | None = None, **changes: Any) -> Path:
    """A CPU plan for the tiny dense model on a free port, saved in the case's work folder."""
    from support.plans import cpu_plan

    path = box.work / "plan.json"
    save_plan(cpu_plan(binary or fx.engine("upstream"), fx.tiny_model("dense"), **changes), path)
    return path


def slow_engine(box: Sandbox, fx: Any, delay: float = 60) -> Path:
    """The real llama-server behind a start that takes ``delay`` s (a large model's load):
    probes (--version, --help …) answer at once, a launch sleeps first, then execs it."""
    real = fx.engine("upstream")
    wrapper = box.work / "llama-server"
    wrapper.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" --version "*|*" --help "*) ;; *" -m "*) sleep '
        + f"{delay:g}"
        + " ;; esac\n"
        f'exec "{real}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def killed_launch(box: Sandbox, fx: Any, sig: int) -> Outcome:
    import signal

    from support.tamper import wait_for

    plan = engine_plan(box, fx, binary=slow_engine(box, fx))
    port = json.loads(plan.read_text())["server"]["port"]
    record = box.state / "servers" / f"{port}.json"
    launch = box.spawn([*CLI_ARGV, "launch", "--plan", str(plan), "--timeout", "120"])
    try:
        wait_for(record.exists, 60, "the loading server's record")
        status = box.cli("server", "status", "--json")
        rows = json.loads(status.stdout)["servers"] if status.stdout.strip() else []
        seen = [(r["port"], r["state"]) for r in rows] == [(port, "loading")]
        pid = json.loads(record.read_text())["pid"]
        launch.send_signal(sig)
        launch.wait(30)
    finally:
        if launch.poll() is None:
            launch.kill()
        launch.communicate()
    from mtpstudio.core.server import procfs

    wait_for(lambda: not procfs.is_running(pid), 15, "the server to die with launch")
    wait_for(lambda: not record.exists(), 15, "the record to go")
    after = box.cli("server", "status")
    ok = seen and after.returncode == 3 and "No server" in after.stdout
    return ok, f"status while loading: {'listed as loading' if seen else 'NOT listed'}; " + (
        f"after {signal.Signals(sig).name} of launch: server gone, record gone"
    )


CLI_ARGV = [sys.executable, "-m", "mtpstudio"]


@case("SIGKILL of launch before healthy", "server dies, record gone", engine=True)
def _launch_sigkill(box: Sandbox, fx: Any) -> Outcome:
    import signal

    return killed_launch(box, fx, signal.SIGKILL)


@case("SIGTERM of launch before healthy", "server dies, record gone", engine=True)
def _launch_sigterm(box: Sandbox, fx: Any) -> Outcome:
    import signal

    return killed_launch(box, fx, signal.SIGTERM)


@case("Ctrl-C of launch before healthy (held)", "server dies, record gone", engine=True)
def _launch_sigint(box: Sandbox, fx: Any) -> Outcome:
    import signal

    return killed_launch(box, fx, signal.SIGINT)


@case("launch, stop (a healthy server outlives launch)", "running, then stopped", engine=True)
def _launch_ok(box: Sandbox, fx: Any) -> Outcome:
    plan = engine_plan(box, fx)
    started = box.cli("launch", "--plan", str(plan))
    status = box.cli("server", "status", "--json")
    rows = json.loads(status.stdout)["servers"] if status.stdout.strip() else []
    stopped = box.cli("server", "stop")
    ok = (started.returncode == 0 and [r["state"] for r in rows] == ["running"]
          and "stopped" in stopped.stdout)  # fmt: skip
    return ok, f"{started.line()[:60]} | {stopped.line()}"


def record_for(
    box: Sandbox, pid: object, start: object, port: int = 18999, binary: str = "/b"
) -> Path:
    record = box.state / "servers" / f"{port}.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({
        "pid": pid, "start_ticks": start, "host": "127.0.0.1", "port": port,
        "log_path": "/x.log", "plan_path": "/x.json", "flavour": "upstream", "binary": binary,
        "argv": [binary], "started_at": 0, "healthy_after_s": 1.0, "schema": 1,
    }, indent=2))  # fmt: skip
    return record


def victim(box: Sandbox) -> subprocess.Popen[bytes]:
    """An unrelated program in its own session: ``setsid sleep 300``."""
    from support.tamper import wait_for

    from mtpstudio.core.server import procfs

    proc = box.spawn(["setsid", "sleep", "300"])
    wait_for(lambda: procfs.process_name(proc.pid) == "sleep", 10, "sleep to start")
    return proc


@case("record start_ticks null -> setsid sleep", "refused to act, sleep lives")
def _null_ticks(box: Sandbox, fx: Any) -> Outcome:
    sleep = victim(box)
    try:
        record_for(box, sleep.pid, None)
        box.settle()
        stop = box.cli("server", "stop")
        alive = sleep.poll() is None
    finally:
        sleep.kill()
        sleep.wait()
    ok = alive and stop.returncode == 0 and "no start time" in stop.stderr
    return ok, f"sleep {'alive' if alive else 'KILLED'}; {stop.line()}"


@case('record "pid": "1"', "refused to act, named once")
def _string_pid(box: Sandbox, fx: Any) -> Outcome:
    record_for(box, "1", 5)
    box.settle()
    ran = box.cli("server", "status")
    return ran.returncode == 3 and "no valid pid" in ran.stderr, ran.line()


@case("record of 100000 nested [", "refused to act, named once")
def _deep_record(box: Sandbox, fx: Any) -> Outcome:
    record = record_for(box, 2, 5)
    record.write_text("[" * 100_000)
    box.settle()
    ran = box.cli("server", "stop")
    return ran.returncode == 0 and "nested too deeply" in ran.stderr, ran.line()


@case("record with a reused pid (held)", "pruned, not signalled")
def _reused_pid(box: Sandbox, fx: Any) -> Outcome:
    from mtpstudio.core.server import procfs

    sleep = victim(box)
    try:
        start = procfs.start_ticks(sleep.pid)
        assert start is not None
        record_for(box, sleep.pid, start + 1)
        stop = box.cli("server", "stop")
        alive = sleep.poll() is None
    finally:
        sleep.kill()
        sleep.wait()
    return alive and stop.returncode == 0, f"sleep {'alive' if alive else 'KILLED'}; {stop.line()}"


# ---------------------------------------------------------------------------------------------
# state files: history (item 7), nesting and size (item 9)


def history_with_a_bad_row(box: Sandbox) -> None:
    import sqlite3

    from mtpstudio.core.bench.history import BenchHistory

    history = BenchHistory(box.data / "bench-history.sqlite3")
    for label in ("good", "bad"):
        history.add_document("gate", label, {"ok": True}, "2026-11-24T00:00:00Z")
    with sqlite3.connect(history.path) as con:
        con.execute("UPDATE runs SET report_json = '{not json' WHERE label = 'bad'")
    box.settle()


@case("history row with bad JSON: bench history", "lists the rest, names it")
def _history_list(box: Sandbox, fx: Any) -> Outcome:
    history_with_a_bad_row(box)
    ran = box.cli("bench", "history")
    ok = ran.returncode == 0 and "good" in ran.stdout and "run 2" in ran.stderr
    return ok and not ran.traceback, ran.line()


@case("history row with bad JSON: bench show", "refused in one line")
def _history_show(box: Sandbox, fx: Any) -> Outcome:
    history_with_a_bad_row(box)
    bad, good = box.cli("bench", "show", "2"), box.cli("bench", "show", "1", "--format", "json")
    return bad.refused("run 2", "damaged") and good.returncode == 0, bad.line()


DEEP = "[" * 100_000


@case("plan of 100000 nested [", "refused in one line")
def _deep_plan(box: Sandbox, fx: Any) -> Outcome:
    plan = box.work / "deep.json"
    plan.write_text(DEEP)
    ran = box.cli("plan", "--plan", str(plan))
    return ran.refused("nested too deeply"), ran.line()


@case("plan that is a FIFO", "refused in one line")
def _fifo_plan(box: Sandbox, fx: Any) -> Outcome:
    plan = box.work / "fifo.json"
    os.mkfifo(plan)
    ran = box.cli("plan", "--plan", str(plan), timeout=60)
    return ran.refused("not a regular file"), ran.line()


def cache_case(box: Sandbox, fx: Any, name: Path) -> Outcome:
    plan = engine_plan(box, fx)
    name.parent.mkdir(parents=True, exist_ok=True)
    name.write_text(DEEP)
    box.settle()
    ran = box.cli("plan", "--plan", str(plan))
    aside = list(name.parent.glob(name.name + ".bad-*"))
    ok = ran.returncode == 0 and len(aside) == 1 and "nested too deeply" in ran.stderr
    return ok and not ran.traceback, ran.line() + f"; set aside: {len(aside)}"


@case("engine-probes.json of 100000 nested [", "set aside, rebuilt", engine=True)
def _deep_probes(box: Sandbox, fx: Any) -> Outcome:
    return cache_case(box, fx, box.cache / "engine-probes.json")


@case("measurements.json of 100000 nested [", "set aside, rebuilt", engine=True)
def _deep_measurements(box: Sandbox, fx: Any) -> Outcome:
    return cache_case(box, fx, box.data / "measurements.json")


@case("last-plan.json and window.json nested 100000 deep", "GUI starts, both set aside")
def _deep_gui_state(box: Sandbox, fx: Any) -> Outcome:
    for name in ("last-plan.json", "window.json"):
        (box.config / name).parent.mkdir(parents=True, exist_ok=True)
        (box.config / name).write_text(DEEP)
    box.settle()
    shot = box.work / "shot.png"
    ran = box.run([*CLI_ARGV, "gui"], env={"MTPSTUDIO_SMOKE_SCREENSHOT": str(shot)},
                  timeout=120)  # fmt: skip
    aside = sorted(p.name.split(".bad-")[0] for p in box.config.glob("*.bad-*"))
    ok = ran.returncode == 0 and aside == ["last-plan.json", "window.json"]
    return ok and not ran.traceback, f"exit {ran.returncode}; set aside: {aside}"


# ---------------------------------------------------------------------------------------------
# loose plan values (item 10) and the benchmark's API key (item 11)


def plan_value(box: Sandbox, section: str, key: str, value: object) -> Any:
    data = json.loads(plan_from_dict({}).to_json())
    data[section][key] = value
    path = box.work / "loose.json"
    path.write_text(json.dumps(data))
    return box.cli("plan", "--plan", str(path))


for _key, _value, _why in (
    ("server.host", "--api-key-file=/etc/shadow", "host must be"),
    ("server.port", True, "server.port"),
    ("runtime.threads", 2**63, "threads must be"),
    ("runtime.fit_margin_mib", 1e15, "runtime.fit_margin_mib"),
    ("runtime.ctx", "4096", "runtime.ctx"),
):

    @case(f"plan {_key}: {json.dumps(_value)[:30]}", "refused in one line")
    def _loose(box: Sandbox, fx: Any, k: str = _key, v: object = _value, w: str = _why) -> Outcome:
        section, key = k.split(".")
        ran = plan_value(box, section, key, v)
        return ran.refused(w), ran.line()


@case('plan host "127.attacker.example"', "not loopback: a key is required")
def _fake_loopback(box: Sandbox, fx: Any) -> Outcome:
    plan = box.work / "p.json"
    save_plan(plan_from_dict({}), plan)
    out = box.work / "out.json"
    ran = box.cli("plan", "--plan", str(plan), "--host", "127.attacker.example", "--save", str(out))
    key = json.loads(out.read_text())["server"]["api_key_file"] if out.exists() else None
    return ran.returncode == 0 and key is not None, f"api_key_file: {key}"


@case("plan api_key_file: a shadow-like file", "refused, no chmod/remove advice")
def _shadow_key(box: Sandbox, fx: Any) -> Outcome:
    shadow = box.work / "shadow"
    shadow.write_text("root:$y$j9T$abc:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n")
    shadow.chmod(0o640)
    plan = box.work / "p.json"
    save_plan(plan_from_dict({"server": {"api_key_file": str(shadow)}}), plan)
    box.settle()
    ran = box.cli("render", "--plan", str(plan), "--out", str(box.work / "out"))
    line = ran.line()
    ok = ran.returncode == 2 and "chmod" not in line and "Remove it" not in line
    return ok and shadow.read_text().startswith("root:"), line


@case("bench --api-key KEY (in ps and history)", "refused in one line")
def _bench_argv_key(box: Sandbox, fx: Any) -> Outcome:
    ran = box.cli("bench", "--url", "http://127.0.0.1:9", "--api-key", "mtps-secret")
    return ran.refused("ps", "--api-key-file"), ran.line()


@case("bench --api-key-file / --api-key - against a keyed server", "both accepted", engine=True)
def _bench_key_file(box: Sandbox, fx: Any) -> Outcome:
    from support.servers import start_server

    key = box.work / "key"
    key.write_text("mtps-tamper-key\n")
    key.chmod(0o600)
    server = start_server(fx.engine("upstream"), fx.tiny_model("dense"),
                          ["--api-key-file", str(key)], log_dir=box.work)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{server.port}"
        common = ("bench", "--url", url, "--categories", "code_python", "--n-predict", "4",
                  "--no-history")  # fmt: skip
        by_file = box.cli(*common, "--api-key-file", str(key))
        by_stdin = box.cli(*common, "--api-key", "-", input=b"mtps-tamper-key\n")
        without = box.cli(*common)
    finally:
        server.stop()
    ok = by_file.returncode == 0 and by_stdin.returncode == 0 and without.returncode != 0
    return ok, f"file: exit {by_file.returncode}, stdin: exit {by_stdin.returncode}, " + (
        f"no key: exit {without.returncode}"
    )


# ---------------------------------------------------------------------------------------------
# issue 33: what the helper installs, downloads, terminals, records, parsers, the Hub


def said(box: Sandbox, *runs: Any, width: int = 90) -> str:
    """The runs' last lines, the sandbox's path shortened to …, each at most ``width`` long."""
    return " | ".join(r.line().replace(str(box.base), "…")[:width] for r in runs)


def _old_style_unit(text: str) -> bytes:
    """The unit as text, the way the helper took it before it built its own files."""
    files = unit_files()
    return json.dumps({"unit": text, "env_name": files["env"].name,
                       "env": files["env"].text}).encode()  # fmt: skip


@case("helper: a unit with Group=disk (as text, or asked for)", "refused, nothing installed")
def _group_disk(box: Sandbox, fx: Any) -> Outcome:
    target = box.root / "etc/systemd/system" / UNIT
    text = unit_files()["unit"].text.replace(
        "SupplementaryGroups=video render\n", "SupplementaryGroups=video render\nGroup=disk\n"
    )
    as_text = box.helper("install-unit", UNIT, payload=_old_style_unit(text))
    if target.exists():
        return False, f"installed with Group=disk: {as_text.line()}"
    asked = box.helper("install-unit", UNIT, payload=unit_payload(group="disk"))
    ok = as_text.refused("refused") and asked.refused("refused") and not target.exists()
    return ok, said(box, as_text, asked, width=70)


def _sshd_plan(box: Sandbox) -> Path:
    path = plan_file(box)
    data = json.loads(path.read_text())
    data["outputs"]["service_name"] = "sshd"
    path.write_text(json.dumps(data))
    return path


@case("apply unit of a shared plan naming sshd (distribution unit)", "refused, sshd kept")
def _shadow_sshd(box: Sandbox, fx: Any) -> Outcome:
    packaged = box.root / "usr/lib/systemd/system/sshd.service"
    packaged.parent.mkdir(parents=True)
    packaged.write_text("[Unit]\nDescription=OpenBSD Secure Shell server\n")
    plan = _sshd_plan(box)
    box.settle()
    shadow = box.root / "etc/systemd/system/sshd.service"
    cli = box.cli("apply", "unit", "--plan", str(plan), "--system", "--account", "alice",
                  "--root", str(box.root), timeout=60)  # fmt: skip
    if shadow.exists():
        return False, f"installed /etc/systemd/system/sshd.service: {cli.line()[:80]}"
    text = unit_files()["unit"].text.replace("mtpstudio-llama.service", "sshd.service")
    direct = box.helper("install-unit", "sshd.service", payload=_old_style_unit(text))
    asked = box.helper("install-unit", "sshd.service", payload=unit_payload())
    ok = cli.refused("sshd.service") and direct.refused() and asked.refused("mtpstudio-")
    return ok and not shadow.exists(), said(box, cli, asked, width=70)


@case("helper: any #!/bin/sh as a login session named plasma.desktop", "refused, none listed")
def _any_session(box: Sandbox, fx: Any) -> Outcome:
    wrapper = "/usr/local/lib/mtpstudio/startplasma-evil"
    desktop = (f"[Desktop Entry]\nType=Application\nName=Plasma (Wayland)\nExec={wrapper}\n"
               f"TryExec={wrapper}\n")  # fmt: skip
    as_text = json.dumps({"sessions_dir": "/usr/local/share/wayland-sessions", "desktop": desktop,
                          "wrapper_name": "startplasma-evil",
                          "wrapper": "#!/bin/sh\nexec /home/eve/.x\n"}).encode()  # fmt: skip
    listed = box.root / "usr/local/share/wayland-sessions/plasma.desktop"
    first = box.helper("install-session", "plasma.desktop", payload=as_text)
    if listed.exists():
        return False, f"listed at every login screen: {first.line()}"
    asked = box.helper("install-session", "plasma.desktop", payload=session_payload())
    ok = first.refused("refused") and asked.refused("refused", "is called")
    return ok and not listed.exists(), said(box, first, asked, width=70)


# -- the Hub and downloads ---------------------------------------------------------------------


def hub_for(box: Sandbox, files: dict[str, bytes | Path], **repo: object) -> Any:
    """A local Hub over real HTTP serving ``eve/x-GGUF`` from files in the case's work folder."""
    from devkit.hub_server import HostedFile, HostedRepo, HubTestServer

    hosted = []
    for rel, content in files.items():
        source = content if isinstance(content, Path) else box.work / "hub" / f"{len(hosted)}"
        if not isinstance(content, Path):
            source.parent.mkdir(parents=True, exist_ok=True)
            source.write_bytes(content)
        hosted.append(HostedFile(rel, source))
    return HubTestServer([HostedRepo("eve/x-GGUF", hosted, **repo)])  # type: ignore[arg-type]


def models_hf(box: Sandbox, hub: Any, *args: str, token: str | None = None) -> Any:
    env = {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(box.cache / "hf")}
    if token:
        env["HF_TOKEN"] = token
    return box.run([*CLI_ARGV, "models", "hf", *args], env=env, timeout=180)


GGUF_BYTES = b"GGUF" + bytes(range(256)) * 16


@case(".part is a symlink to a file outside, then resume", "refused, outside file untouched")
def _part_link(box: Sandbox, fx: Any) -> Outcome:
    import hashlib

    victim = box.outside / "victim.bin"
    victim.write_bytes(b"14 bytes here\n")
    folder = box.work / "dl"
    folder.mkdir()
    (folder / "tiny-Q4_0.gguf.part").symlink_to(victim)
    sidecar = {"path": "tiny-Q4_0.gguf", "size": len(GGUF_BYTES),
               "sha256": hashlib.sha256(GGUF_BYTES).hexdigest()}  # fmt: skip
    (folder / "tiny-Q4_0.gguf.part.json").write_text(json.dumps(sidecar))
    with hub_for(box, {"tiny-Q4_0.gguf": GGUF_BYTES}) as hub:
        box.settle()
        ran = models_hf(box, hub, "eve/x-GGUF", "--download", "tiny-Q4_0.gguf", "--to",
                        str(folder))  # fmt: skip
    size = victim.stat().st_size
    ok = ran.refused("symbolic link") and size == 14
    return ok, f"outside file {size} bytes; {said(box, ran)}"


@case("zero-byte file and a size of -3 on the Hub, then --download", "refused in one line")
def _zero_size(box: Sandbox, fx: Any) -> Outcome:
    folder = box.work / "dl"
    files: dict[str, bytes | Path] = {"empty-Q4_0.gguf": b"", "neg-Q5_0.gguf": GGUF_BYTES,
                                      "ok-Q8_0.gguf": GGUF_BYTES}  # fmt: skip
    with hub_for(box, files) as hub:
        hub.faults.listed_size["neg-Q5_0.gguf"] = -3
        box.settle()
        runs = [models_hf(box, hub, "eve/x-GGUF", "--download", name, "--to", str(folder))
                for name in ("empty-Q4_0.gguf", "neg-Q5_0.gguf")]  # fmt: skip
    left = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
    ok = all(r.refused("names none") for r in runs) and not left
    return ok, said(box, *runs, width=60) + f"; left in the folder: {left}"


@case("same-named files in two folders of a repository", "two rows, two files")
def _same_names(box: Sandbox, fx: Any) -> Outcome:
    folder = box.work / "dl"
    files: dict[str, bytes | Path] = {"a/tiny-Q8_0.gguf": GGUF_BYTES + b"a",
                                      "b/tiny-Q8_0.gguf": GGUF_BYTES + b"bb"}  # fmt: skip
    with hub_for(box, files) as hub:
        box.settle()
        listing = models_hf(box, hub, "eve/x-GGUF")
        got = [models_hf(box, hub, "eve/x-GGUF", "--download", f"{x}/tiny-Q8_0.gguf", "--to",
                         str(folder)) for x in ("a", "b")]  # fmt: skip
    rows = [ln for ln in listing.stdout.splitlines() if "tiny-Q8_0.gguf" in ln and "Q8_0  " in ln]
    shown = sorted({w for ln in rows for w in ln.split() if w.endswith("tiny-Q8_0.gguf")})
    on_disk = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.gguf"))
    contents = {p.read_bytes()[-2:] for p in folder.rglob("*.gguf")}
    ok = shown == ["a/tiny-Q8_0.gguf", "b/tiny-Q8_0.gguf"] and len(contents) == 2
    return ok, f"rows {shown}; files {on_disk}; {said(box, got[1], width=60)}"


@case("HF token and a next page on another host", "refused, token kept")
def _token_elsewhere(box: Sandbox, fx: Any) -> Outcome:
    token = "hf_tamper_0123456789"
    files: dict[str, bytes | Path] = {f"m{i}-Q4_0.gguf": GGUF_BYTES for i in range(3)}
    with hub_for(box, files, private=True, token=token) as hub:
        hub.faults.page_size = 1
        hub.faults.next_page_origin = hub.storage  # another host:port
        box.settle()
        ran = models_hf(box, hub, "eve/x-GGUF", token=token)
        leaked = list(hub.auth_seen_by_storage)
    ok = ran.refused("another host") and not leaked
    return ok, f"token seen by the other host: {len(leaked)} time(s); {said(box, ran)}"


@case("repository id a--b/c (looser than the Hub's)", "refused in one line")
def _loose_repo_id(box: Sandbox, fx: Any) -> Outcome:
    ran = box.cli("models", "hf", "a--b/c")
    return ran.refused("not a model repository name"), ran.line()


@case("four headers that never end (60 MiB strings)", "read within the listing's budget")
def _endless_headers(box: Sandbox, fx: Any) -> Outcome:
    import struct

    from mtpstudio.core.hub.remote_header import FIRST_RANGE

    files: dict[str, bytes | Path] = {}
    for q in ("Q2_K", "Q3_K", "Q4_0", "Q5_0"):
        path = box.work / f"endless-{q}.gguf"
        key = b"general.name"
        head = b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, len(key)) + key
        with open(path, "wb") as out:
            out.write(head + struct.pack("<IQ", 8, 60 << 20))
            out.truncate(61 << 20)
        files[path.name] = path
    budget = 4 * FIRST_RANGE + (64 << 20)  # each first range, and 64 MiB shared beyond them
    with hub_for(box, files) as hub:
        box.settle()
        ran = models_hf(box, hub, "eve/x-GGUF", "--json")
        read = sum(hub.bytes_sent.values())
    ok = ran.returncode == 0 and read <= budget
    return ok, f"{read / 1e6:,.0f} MB read (budget {budget / 1e6:,.0f} MB)"


# -- what is shown on the terminal ------------------------------------------------------------

ESCAPES = "\x1b]0;owned\x07\x1b[2J"


def _no_escapes(*runs: Any) -> bool:
    text = "".join(r.stdout + r.stderr for r in runs)
    return "\x1b" not in text and "\x07" not in text


@case("GGUF general.name with terminal escapes and a newline", "shown with escapes visible")
def _gguf_name(box: Sandbox, fx: Any) -> Outcome:
    from gguf.constants import GGUFValueType
    from support.gguf_builders import KV, Qwen35MoeParams, qwen35moe_specs, write_gguf

    kv, tensors = qwen35moe_specs(Qwen35MoeParams())
    name = f"Qwen{ESCAPES}\n  fits: yes, 0 MiB over"
    kv = [KV("general.name", name, GGUFValueType.STRING) if k.key == "general.name" else k
          for k in kv]  # fmt: skip
    model = box.work / "evil.gguf"
    write_gguf(model, "qwen35moe", kv=kv, tensors=tensors)
    box.settle()
    ran = box.cli("plan", "--model", str(model), "--gpu", "rtx-4070-super")
    forged = any(line.startswith("  fits: yes") for line in ran.stdout.splitlines())
    ok = ran.returncode == 0 and _no_escapes(ran) and not forged and "\\x1b]0;owned" in ran.stdout
    shown = next((ln.strip() for ln in ran.stdout.splitlines() if "owned" in ln), "")[:70]
    return ok, f"exit {ran.returncode}; {shown!r}"


@case("hub file names with escapes and a forged newline row", "left out, shown visible")
def _hub_names(box: Sandbox, fx: Any) -> Outcome:
    files: dict[str, bytes | Path] = {
        f"x{ESCAPES}.gguf": GGUF_BYTES,
        "y\n  ★  fake-Q4_K_M.gguf  1.0 MB  yes  yes  none.gguf": GGUF_BYTES,
        "ok-Q8_0.gguf": GGUF_BYTES,
    }
    with hub_for(box, files) as hub:
        box.settle()
        ran = models_hf(box, hub, "eve/x-GGUF")
    forged = any(line.lstrip().startswith("★  fake") for line in ran.stdout.splitlines())
    ok = ran.returncode == 0 and _no_escapes(ran) and not forged
    notes = [ln.strip()[:60] for ln in ran.stdout.splitlines() if "left out" in ln]
    return ok, f"exit {ran.returncode}; {notes[:1]}"


class _HostileServer:
    """A llama-server impostor on loopback: /health and /props answer, the completion endpoint
    answers ``mode``: an error body full of escapes, or an endless line."""

    def __init__(self, mode: str) -> None:
        import socket
        import threading

        self.mode, self.sent = mode, 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        import socket

        from support.servers import read_http_request

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                if read_http_request(conn) != "POST":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                elif self.mode == "escapes":
                    body = json.dumps({"error": {"message": f"bad{ESCAPES}\nfake: ok"}}).encode()
                    conn.sendall(b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n" % len(body)
                                 + body)  # fmt: skip
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
                    chunk = b"x" * (1 << 20)
                    for _ in range(1024):  # 1 GiB unless the client stops reading
                        conn.sendall(chunk)
                        self.sent += len(chunk)
                conn.shutdown(socket.SHUT_WR)  # the answer ends here, cleanly

    def close(self) -> None:
        self.sock.close()


@case("server error body with escapes and a newline (bench)", "refused, escapes visible")
def _server_body(box: Sandbox, fx: Any) -> Outcome:
    server = _HostileServer("escapes")
    try:
        ran = box.cli("bench", "--url", server.url, "--categories", "code_python",
                      "--n-predict", "4", "--no-history")  # fmt: skip
    finally:
        server.close()
    ok = ran.refused("HTTP 500") and _no_escapes(ran) and "\\x1b]0;owned" in ran.stderr
    return ok, said(box, ran, width=110)


@case("bench against a server streaming an endless line", "refused, a bounded read")
def _endless_line(box: Sandbox, fx: Any) -> Outcome:
    server = _HostileServer("endless")
    try:
        ran = box.cli("bench", "--url", server.url, "--categories", "code_python",
                      "--n-predict", "4", "--no-history", timeout=300)  # fmt: skip
    finally:
        server.close()
    ok = ran.refused("longer than") and server.sent < (128 << 20)
    return ok, f"{server.sent >> 20} MiB sent before the client stopped; {said(box, ran)}"


# -- records, state files and plans -----------------------------------------------------------


@case("record: right pid and start time, another program (setsid sleep)", "sleep lives")
def _other_program(box: Sandbox, fx: Any) -> Outcome:
    from mtpstudio.core.server import procfs

    sleep = victim(box)
    try:
        start = procfs.start_ticks(sleep.pid)
        record_for(box, sleep.pid, start)  # the record's engine is /b
        box.settle()
        stop = box.cli("server", "stop")
        alive = sleep.poll() is None
    finally:
        sleep.kill()
        sleep.wait()
    return alive and stop.returncode == 0, f"sleep {'alive' if alive else 'KILLED'}; {stop.line()}"


@case("record of a process inside another's group", "it stops, the group's leader lives")
def _not_a_leader(box: Sandbox, fx: Any) -> Outcome:
    import signal as signals
    import time

    from mtpstudio.core.server import procfs

    leader = box.spawn(["setsid", "sh", "-c", "sleep 300 & echo $!; exec sleep 301"])
    try:
        assert leader.stdout is not None
        inner = int(leader.stdout.readline())
        for _ in range(200):
            if procfs.process_name(inner) == "sleep":
                break
            time.sleep(0.01)
        start = procfs.start_ticks(inner)
        record_for(box, inner, start, binary="/usr/bin/sleep")
        box.settle()
        stop = box.cli("server", "stop")
        stopped = not procfs.is_running(inner, start)
        lives = leader.poll() is None
    finally:
        group = procfs.process_group(inner)
        if group is not None and group > 1:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signals.SIGKILL)
        leader.kill()
        leader.wait()
    ok = stopped and lives and stop.returncode == 0
    return ok, f"recorded sleep {'stopped' if stopped else 'running'}, leader " + (
        f"{'alive' if lives else 'KILLED'}; {said(box, stop)}"
    )


@case("server record with a 5,000-digit pid", "ignored, named once")
def _digits_record(box: Sandbox, fx: Any) -> Outcome:
    record = record_for(box, 2, 5)
    record.write_text(record.read_text().replace('"pid": 2', '"pid": ' + "1" * 5000))
    box.settle()
    ran = box.cli("server", "status")
    named = [ln for ln in ran.error_lines if "18999.json" in ln]
    return ran.returncode == 3 and len(named) == 1 and not ran.traceback, said(box, ran, width=130)


@case("plan with a 5,000-digit context", "refused in one line")
def _digits_plan(box: Sandbox, fx: Any) -> Outcome:
    data = json.loads(plan_from_dict({}).to_json())
    path = box.work / "digits.json"
    path.write_text(json.dumps(data).replace('"ctx": ', '"ctx": ' + "9" * 5000 + ', "x": '))
    ran = box.cli("plan", "--plan", str(path))
    return ran.refused("plan file"), said(box, ran, width=130)


# -- engines found on PATH -------------------------------------------------------------------


def _counting_engine(folder: Path, counter: Path) -> Path:
    binary = folder / "llama-server"
    folder.mkdir(parents=True, exist_ok=True)
    binary.write_text(f"#!/bin/sh\necho run >> {counter}\nexit 1\n")
    binary.chmod(0o755)
    return binary


@case("PATH with '.' and a llama-server in the working folder", "never run")
def _relative_path(box: Sandbox, fx: Any) -> Outcome:
    counter = box.work / "runs"
    _counting_engine(box.work, counter)
    box.settle()
    path = f".{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    ran = box.run([*CLI_ARGV, "detect", "--refresh"], env={"PATH": path})
    runs = len(counter.read_text().splitlines()) if counter.exists() else 0
    return ran.returncode == 0 and runs == 0, f"run {runs} times; exit {ran.returncode}"


@case("llama-server in another user's folder on PATH", "never run", needs_root=True)
def _other_users_engine(box: Sandbox, fx: Any) -> Outcome:
    counter = box.work / "runs"
    theirs = box.work / "theirs"
    _counting_engine(theirs, counter)
    os.chown(theirs, 65534, 65534)
    box.settle()
    path = f"{theirs}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    ran = box.run([*CLI_ARGV, "detect", "--refresh"], env={"PATH": path})
    runs = len(counter.read_text().splitlines()) if counter.exists() else 0
    said = "belongs to another user" in ran.stdout + ran.stderr
    return ran.returncode == 0 and runs == 0 and said, f"run {runs} times; exit {ran.returncode}"


# ---------------------------------------------------------------------------------------------
# the runner and the table


@pytest.fixture(scope="module")
def table(request: pytest.FixtureRequest) -> Iterator[list[Row]]:
    rows: list[Row] = []
    yield rows
    if rows:  # printed past pytest's capture, like capsys.disabled()
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():
            print("\n\ntamper-and-fault suite\n" + render_table(rows), flush=True)


class Fixtures:
    """Fixtures a case asks for only when it needs them (engines, tiny models)."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request

    def __getattr__(self, name: str) -> Any:
        return self._request.getfixturevalue(name)


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=[pytest.mark.engine] if c.engine else []) for n, c in CASES.items()],
)
def test_case(name: str, tmp_path: Path, table: list[Row], request: pytest.FixtureRequest) -> None:
    c = CASES[name]
    if c.needs_root and os.geteuid() != 0:
        table.append(Row(name, c.expected, "not run here: needs root", True, 0, 0, 0))
        pytest.skip("needs root (mounts a tmpfs)")
    engines = os.environ["MTPSTUDIO_ENGINE_CACHE"]  # set by the autouse XDG fixture
    box = Sandbox(tmp_path / "box", f"{name}-{os.getpid()}", engines)
    try:
        held, got = c.run(box, Fixtures(request))
    except Exception as exc:  # the case could not run to its end: a failed row, not a lost one
        held, got = False, f"the case itself failed: {type(exc).__name__}: {exc}"
    got = got.replace(str(box.base), "…")
    outside = changed_outside(box.before, box.tree())
    leftover = box.leftovers()
    tracebacks = [r for r in box.runs if r.traceback]
    row = Row(name, c.expected, got, held, len(outside), len(leftover), len(tracebacks))
    table.append(row)
    assert row.passed, {"got": got, "changed outside": outside, "left running": leftover,
                        "tracebacks": [r.stderr[-2000:] for r in tracebacks]}  # fmt: skip
