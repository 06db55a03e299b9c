"""This distribution, read from ``/etc/os-release``: which package provides what (pkexec, a
compiler), for messages that name the exact command to run."""

from __future__ import annotations

from pathlib import Path


def _os_release(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip("\"'")
    return out


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def polkit_package(os_release: str) -> tuple[str, str]:
    """(package, command) that install pkexec on the distribution ``/etc/os-release`` names.

    Debian split pkexec out of polkit in 12 (bookworm) and Ubuntu in 23.04; before that it
    came with ``policykit-1``. Arch, Fedora, openSUSE and their derivatives ship it in
    ``polkit``.
    """
    info = _os_release(os_release)
    distro = info.get("ID", "")
    ids = [distro, *info.get("ID_LIKE", "").split()]
    version = _version(info.get("VERSION_ID", ""))
    if distro == "ubuntu" or "ubuntu" in ids:
        base = version if distro == "ubuntu" else _version(info.get("UBUNTU_VERSION_ID", ""))
        pkg = "policykit-1" if base and base < (23, 4) else "pkexec"
        return pkg, f"sudo apt install {pkg}"
    if "debian" in ids:
        pkg = "policykit-1" if distro == "debian" and version and version < (12,) else "pkexec"
        return pkg, f"sudo apt install {pkg}"
    if any(i in ids for i in ("arch", "archlinux", "cachyos", "manjaro", "endeavouros")):
        return "polkit", "sudo pacman -S polkit"
    if any(i in ids for i in ("fedora", "rhel", "centos")):
        return "polkit", "sudo dnf install polkit"
    if any(i.startswith("opensuse") or i in {"suse", "sles"} for i in ids):
        return "polkit", "sudo zypper install polkit"
    return "polkit", "install polkit (the package that provides pkexec) with your package manager"


def read_os_release(root: Path = Path("/")) -> str:
    for rel in ("etc/os-release", "usr/lib/os-release"):
        try:
            return (root / rel).read_text(errors="replace")
        except OSError:
            continue
    return ""


def toolchain_command(os_release: str) -> str:
    """The command that installs git, cmake and a C++ compiler here."""
    _, pkexec_command = polkit_package(os_release)
    for manager, command in (
        ("sudo apt", "sudo apt install git cmake g++"),
        ("sudo pacman", "sudo pacman -S --needed git cmake gcc"),
        ("sudo dnf", "sudo dnf install git cmake gcc-c++"),
        ("sudo zypper", "sudo zypper install git cmake gcc-c++"),
    ):
        if pkexec_command.startswith(manager):
            return command
    return "install git, cmake and a C++ compiler"
