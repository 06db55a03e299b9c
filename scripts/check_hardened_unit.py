#!/usr/bin/env python3
"""Start the hardened system unit under a real systemd and check the engine serves.

Where systemd is not PID 1 (a CI container), this boots a Debian tree with
``systemd-nspawn --boot``: the unit and its environment file are installed into the tree by
``mtpstudio apply unit --system --root TREE`` (the helper's code and checks), the engine and a
GGUF model are bound read-only at the same paths as on this machine (under /home by default,
so ``ProtectHome=read-only`` is exercised), and a one-shot unit inside starts the service,
waits for ``/health``, asks for a completion and records what the kernel says about the
process (user, capabilities, no_new_privs, seccomp, mounts), which device nodes the unit's
device policy lets through, ``systemd-analyze security`` on the live unit and the journal,
then powers the container off. The container's systemd runs on the unified cgroup hierarchy
with ``bpf()`` allowed, so device policies and IP address lists are enforced as on a host.

Needs root, systemd-container and a Debian tree with systemd, e.g.::

    debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,curl bookworm TREE
    scripts/check_hardened_unit.py --tree TREE --engine BUILD/bin/llama-server --model M.gguf

Prints the report and exits 0 when the engine answered healthy and a completion came back.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ACCOUNT = "llama"
# The container's systemd on the unified cgroup hierarchy: device policies and IP address
# lists are BPF programs there, which need no cgroup controller from the host.
NSPAWN_ENV = {"SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}
NSPAWN_EXTRA = ["--system-call-filter=bpf", "--capability=CAP_BPF"]
PORT = 18181
CHECK = """#!/bin/bash
# Runs inside the container once it has booted; writes /out/report.txt, then powers off.
unit=mtpstudio-llama.service
{{
  echo "== systemd: $(systemctl --version | head -1)"
  systemctl start "$unit"; echo "systemctl start: exit $?"
  code=000
  for i in $(seq 1 120); do
    code=$(curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/health)
    [ "$code" = 200 ] && break
    sleep 1
  done
  echo "== /health: HTTP $code after ${{i}} s"
  echo "== completion:"
  curl -s http://127.0.0.1:{port}/completion \\
    -d '{{"prompt": "Hello", "n_predict": 8}}' | head -c 400; echo
  echo "== unit:"
  systemctl show "$unit" -p ActiveState -p SubState -p MainPID -p User -p NRestarts
  pid=$(systemctl show -p MainPID --value "$unit")
  echo "== /proc/$pid/status:"
  grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' \\
    "/proc/$pid/status"
  echo "== mounts the service sees:"
  grep -E ' (/home|/usr|/etc|/tmp|/var/tmp|/var/cache/mtpstudio) ' "/proc/$pid/mountinfo" \\
    | awk '{{print $5, $6}}'
  echo "== in the service's mount namespace: the model reads, /home does not take writes:"
  nsenter -t "$pid" -m sh -c 'head -c 4 {model}; echo; touch /home/probe 2>&1 | tail -1'
  echo "== systemd-analyze security (live unit):"
  systemd-analyze security --no-pager "$unit" | tail -1
  echo "== cgroup file system: $(stat -fc %T /sys/fs/cgroup)"
  echo "== nodes opened under the unit's DevicePolicy=closed and DeviceAllow= lines, plus"
  echo "   char-misc: 'No such device' = allowed (no driver), 'not permitted' = denied:"
  grep -E '^ *(10|195|226|254) ' /proc/devices | sed 's|^ *|   /proc/devices: |'
  mknod /dev/probe-misc c 10 240; mknod /dev/probe-nvidia c 195 0; mknod /dev/probe-vda b 254 0
  props=(-p DevicePolicy=closed -p "DeviceAllow=char-misc rw")
  while IFS= read -r line; do props+=(-p "$line"); done \
    < <(grep '^DeviceAllow=' "/etc/systemd/system/$unit")
  systemd-run --quiet --wait --pipe "${{props[@]}}" sh -c 'for d in misc nvidia vda; do
      if (exec 3</dev/probe-$d) 2>/run/probe-err; then echo "   /dev/probe-$d: opened"
      else echo "   $(cat /run/probe-err)"; fi; done'
  echo "== the unit's journal this boot:"
  journalctl -b -u "$unit" --no-pager -o cat | tail -25
}} > /out/report.txt 2>&1
systemctl poweroff
"""
CHECK_UNIT = """[Unit]
Description=mtpstudio hardened unit check
After=multi-user.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/mtpstudio-check

[Install]
WantedBy=multi-user.target
"""


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(argv), flush=True)
    return subprocess.run(argv, text=True, check=True, **kwargs)  # type: ignore[call-overload]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", type=Path, required=True, help="a Debian tree with systemd")
    p.add_argument("--engine", type=Path, required=True, help="a llama-server build")
    p.add_argument("--model", type=Path, required=True, help="a GGUF file it loads")
    p.add_argument("--share", type=Path, default=Path("/home/mtpstudio-check"),
                   help="folder for the engine and model, bound at the same path")  # fmt: skip
    p.add_argument("--timeout", type=float, default=300, help="seconds for the whole boot")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("needs root (systemd-nspawn)", file=sys.stderr)
        return 2
    tree, share = args.tree.resolve(), args.share
    share.mkdir(parents=True, exist_ok=True)
    share.chmod(0o755)
    engine = share / "engine" / "llama-server"
    engine.parent.mkdir(exist_ok=True)
    shutil.copy2(args.engine, engine)
    model = share / "models" / "model.gguf"
    model.parent.mkdir(exist_ok=True)
    shutil.copy2(args.model, model)
    model.chmod(0o644)
    for folder in (tree / str(share).lstrip("/"),):
        folder.mkdir(parents=True, exist_ok=True)  # the bind mount's target
    # A desktop's udev creates the render group (/dev/dri/renderD*, /dev/kfd); a bare tree
    # has none, and SupplementaryGroups= naming a missing group fails the start (216/GROUP).
    if subprocess.run(["chroot", str(tree), "getent", "group", "render"],
                      capture_output=True).returncode:  # fmt: skip
        run(["chroot", str(tree), "groupadd", "--system", "render"])
    if subprocess.run(["chroot", str(tree), "id", ACCOUNT], capture_output=True).returncode:
        run(["chroot", str(tree), "useradd", "--system", "--no-create-home", ACCOUNT])

    with tempfile.TemporaryDirectory(prefix="mtpstudio-check-") as tmp:
        work = Path(tmp)
        plan = work / "plan.json"
        run([sys.executable, "-m", "mtpstudio", "plan", "--model", str(model),
             "--engine", str(engine), "--gpu", "cpu", "--ctx", "512", "--threads", "2",
             "--port", str(PORT), "--save", str(plan)], stdout=subprocess.DEVNULL)  # fmt: skip
        data = json.loads(plan.read_text())
        data["runtime"].update(cache_type_k="f16", cache_type_v="f16")
        data["mtp"]["enabled"] = False
        plan.write_text(json.dumps(data))
        run([sys.executable, "-m", "mtpstudio", "apply", "unit", "--plan", str(plan), "--system",
             "--account", ACCOUNT, "--root", str(tree)])  # fmt: skip
        script = tree / "usr/local/sbin/mtpstudio-check"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(CHECK.format(port=PORT, model=model))
        script.chmod(0o755)
        (tree / "etc/systemd/system/mtpstudio-check.service").write_text(CHECK_UNIT)
        wants = tree / "etc/systemd/system/multi-user.target.wants"
        wants.mkdir(parents=True, exist_ok=True)
        link = wants / "mtpstudio-check.service"
        link.unlink(missing_ok=True)
        link.symlink_to("/etc/systemd/system/mtpstudio-check.service")
        out = work / "out"
        out.mkdir()
        try:
            subprocess.run(
                ["systemd-nspawn", "--quiet", "--boot", "--register=no", "--keep-unit",
                 "-D", str(tree), f"--bind-ro={share}", f"--bind={out}:/out", *NSPAWN_EXTRA],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=args.timeout,
                check=False, env={**os.environ, **NSPAWN_ENV},
            )  # fmt: skip
        finally:
            link.unlink(missing_ok=True)
            run([sys.executable, "-m", "mtpstudio", "revert", "unit", "--root", str(tree)])
            shutil.rmtree(engine.parent)
            shutil.rmtree(model.parent)
            with contextlib.suppress(OSError):
                share.rmdir()  # only when it holds nothing else
        report = (out / "report.txt").read_text() if (out / "report.txt").exists() else ""
    print(report or "no report: the container did not run the check")
    healthy = "== /health: HTTP 200" in report and '"content"' in report
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
