#!/usr/bin/env python3
"""Build the Debian 12 tree the journey test boots, and the wheels its user installs from.

The tree is a desktop machine as a new user has it: systemd (PID 1 under
``systemd-nspawn --boot``), D-Bus, polkit and pkexec, SDDM 0.19 and the Plasma 5.27 Wayland
session from Debian (without recommends, as ``scripts/test`` installs them on the host), Python
with ``venv``, the runtime libraries of the Qt offscreen platform and of ``llama-server``, and
one account with a password in the ``sudo`` group (Debian's polkit rules make that group the
administrators). Nothing of mtpstudio is in it: the test installs mtpstudio as that user, the
README's way.

The wheels are every dependency of mtpstudio (and setuptools/wheel to build the editable
install), downloaded once with pip, so the README's ``pip install -e .`` inside the tree runs
from a folder instead of fetching ~100 MB from PyPI on every run.

Both land in ``$MTPSTUDIO_JOURNEY_CACHE`` or ``$XDG_CACHE_HOME/mtpstudio/journey`` (default
``~/.cache/mtpstudio/journey``), keyed by what goes in them (package list and this script's
recipe; the dependency list), built in a temporary folder and renamed when complete, and
reused afterwards. Needs root, ``debootstrap`` and ``systemd-nspawn`` (scripts/test installs
both). Only the standard library is used.

Usage: build_journey_tree.py [--print-paths] [--mirror URL] [--python PY]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
ACCOUNT = "ada"
PASSWORD = "journey-pass-1"  # the test's polkit agent answers with it
BASE_PACKAGES = ("systemd", "systemd-sysv", "dbus", "libpam-systemd")
PACKAGES = (
    # polkit: the daemon, pkexec and the text agent (pkttyagent)
    "polkitd", "pkexec",
    # the login screen and the session mtpstudio wraps
    "sddm", "plasma-workspace-wayland", "kwin-wayland",
    # the README's install: Python with venv
    "python3", "python3-venv",
    # Qt's runtime libraries (the README's "System packages" line, offscreen needs a few)
    "libegl1", "libgl1", "libopengl0", "libfontconfig1", "libdbus-1-3", "libglib2.0-0",
    "libxkbcommon0", "libxkbcommon-x11-0", "fonts-dejavu-core",
    # llama-server's libraries, and curl for /health
    "libgomp1", "libssl3", "curl", "ca-certificates",
)  # fmt: skip
RECIPE = 1  # bump when the steps below change what the tree holds
READY = "ready.json"
NSPAWN = ("systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--pipe")
"""A command inside the tree (not booted): no machine registered, no scope unit made."""


def cache_root() -> Path:
    explicit = os.environ.get("MTPSTUDIO_JOURNEY_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "mtpstudio" / "journey"


def say(message: str) -> None:
    print(f"[journey-tree] {message}", flush=True)


def run(argv: list[str], **kwargs: object) -> None:
    say("$ " + " ".join(argv))
    subprocess.run(argv, check=True, **kwargs)  # type: ignore[call-overload]


def _key(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def tree_path(root: Path | None = None) -> Path:
    """Where the tree for this recipe is (built or not)."""
    key = _key({"suite": SUITE, "base": BASE_PACKAGES, "packages": PACKAGES, "recipe": RECIPE,
                "account": ACCOUNT})  # fmt: skip
    return (root or cache_root()) / f"debian12-{key}"


def project_requirements() -> list[str]:
    """mtpstudio's runtime dependencies (pyproject.toml) and what building it needs."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    build = list(data["build-system"]["requires"])
    return sorted({*data["project"]["dependencies"], *build})


def wheels_path(root: Path | None = None) -> Path:
    return (root or cache_root()) / f"wheels-{_key(project_requirements())}"


def _in_tree(tree: Path, *argv: str) -> None:
    """Run a command inside the (not booted) tree, as root."""
    run([*NSPAWN, "-D", str(tree),
         "--setenv=DEBIAN_FRONTEND=noninteractive", *argv], stdin=subprocess.DEVNULL)  # fmt: skip


def build_tree(target: Path, mirror: str) -> None:
    work = target.with_name(target.name + ".part")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    rootfs = work / "root"
    started = time.monotonic()
    run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE,
         str(rootfs), mirror])  # fmt: skip
    # No service starts while packages are installed (there is no running systemd anyway).
    policy = rootfs / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    _in_tree(rootfs, "apt-get", "update", "-qq")
    _in_tree(rootfs, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES)
    _in_tree(rootfs, "apt-get", "clean")
    policy.unlink()
    # The machine boots to a console: no display manager runs in a container.
    for name in ("display-manager.service",):
        (rootfs / "etc/systemd/system" / name).unlink(missing_ok=True)
    _in_tree(rootfs, "useradd", "--create-home", "--shell", "/bin/bash", "--groups", "sudo",
             ACCOUNT)  # fmt: skip
    run([*NSPAWN, "-D", str(rootfs), "chpasswd"], input=f"{ACCOUNT}:{PASSWORD}\n".encode())
    (rootfs / "etc/hostname").write_text("journey\n")
    sddm = subprocess.run(
        [*NSPAWN, "-D", str(rootfs),
         "dpkg-query", "-W", "-f=${Version}", "sddm"],
        capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL,
    ).stdout  # fmt: skip
    (work / READY).write_text(json.dumps({
        "suite": SUITE, "packages": PACKAGES, "account": ACCOUNT, "sddm": sddm,
        "built_in_s": round(time.monotonic() - started), "mirror": mirror,
    }, indent=2) + "\n")  # fmt: skip
    if target.exists():
        shutil.rmtree(target)
    work.rename(target)
    say(f"tree ready in {target} (SDDM {sddm})")


def build_wheels(target: Path, python: str) -> None:
    work = target.with_name(target.name + ".part")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    run([python, "-m", "pip", "download", "-q", "--disable-pip-version-check",
         "--only-binary", ":all:", "-d", str(work), *project_requirements()])  # fmt: skip
    (work / READY).write_text(json.dumps({"requirements": project_requirements()}) + "\n")
    if target.exists():
        shutil.rmtree(target)
    work.rename(target)
    say(f"wheels ready in {target}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--print-paths", action="store_true", help="print the two folders and stop")
    p.add_argument("--mirror", default=os.environ.get("MTPSTUDIO_DEBIAN_MIRROR", MIRROR))
    p.add_argument("--python", default=sys.executable, help="the pip that downloads the wheels")
    args = p.parse_args(argv)
    tree, wheels = tree_path(), wheels_path()
    if args.print_paths:
        print(
            json.dumps(
                {
                    "tree": str(tree / "root"),
                    "wheels": str(wheels),
                    "ready": (tree / READY).is_file() and (wheels / READY).is_file(),
                }
            )
        )
        return 0
    if os.geteuid() != 0:
        print("build_journey_tree.py: needs root (debootstrap, systemd-nspawn)", file=sys.stderr)
        return 2
    # root's tools (debootstrap, and the chroot it runs) live in the sbin folders, which a
    # user's PATH (and CI's minimal one) leaves out
    path = os.environ.get("PATH", "").split(os.pathsep)
    os.environ["PATH"] = os.pathsep.join(
        [*path, *(d for d in ("/usr/local/sbin", "/usr/sbin", "/sbin") if d not in path)]
    )
    for tool in ("debootstrap", "systemd-nspawn"):
        if shutil.which(tool) is None:
            print(f"build_journey_tree.py: {tool} is missing (apt install "
                  f"{'debootstrap' if tool == 'debootstrap' else 'systemd-container'})",
                  file=sys.stderr)  # fmt: skip
            return 2
    if (tree / READY).is_file():
        say(f"tree cached: {tree}")
    else:
        build_tree(tree, args.mirror)
    if (wheels / READY).is_file():
        say(f"wheels cached: {wheels}")
    else:
        build_wheels(wheels, args.python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
