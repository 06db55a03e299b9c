"""Start, stop, status and journal of the systemd units mtpstudio installed (user or system)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtpstudio.core import paths
from mtpstudio.core.errors import ServerError
from mtpstudio.core.runner import Runner, RunResult

SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
MARKER = "Written by mtpstudio"
SYSTEMCTL_TIMEOUT_S = 30.0
SHOW_PROPERTIES = ("LoadState", "ActiveState", "SubState", "MainPID", "ExecMainStatus", "Result")


@dataclass(frozen=True)
class UnitRef:
    """A unit name (``.service`` added when missing) and its manager: user or system."""

    name: str
    user: bool

    @classmethod
    def of(cls, name: str, user: bool) -> UnitRef:
        if not name or "/" in name or any(c.isspace() for c in name):
            raise ServerError(f"{name!r} is not a systemd unit name")
        return cls(name if "." in name else f"{name}.service", user)

    @property
    def scope_args(self) -> tuple[str, ...]:
        return ("--user",) if self.user else ()

    def unit_file(self, unit_dir: Path | None = None) -> Path:
        folder = unit_dir or (paths.user_unit_dir() if self.user else SYSTEM_UNIT_DIR)
        return folder / self.name


def systemctl_argv(unit: UnitRef, verb: str) -> list[str]:
    """``systemctl [--user] <verb> <unit>`` (pure)."""
    return ["systemctl", *unit.scope_args, verb, unit.name]


def show_argv(unit: UnitRef) -> list[str]:
    return [
        "systemctl",
        *unit.scope_args,
        "show",
        unit.name,
        "--property=" + ",".join(SHOW_PROPERTIES),
        "--no-pager",
    ]


def journal_argv(unit: UnitRef, lines: int, follow: bool = False) -> list[str]:
    """``journalctl [--user] -u <unit> -n N --no-pager -o cat [-f]`` (pure)."""
    argv = ["journalctl", *unit.scope_args, "-u", unit.name, "-n", str(lines), "--no-pager"]
    argv += ["-o", "cat"]
    if follow:
        argv.append("-f")
    return argv


@dataclass(frozen=True)
class UnitStatus:
    """What ``systemctl show`` said about a unit."""

    unit: UnitRef
    properties: Mapping[str, str]

    @property
    def active(self) -> bool:
        return self.properties.get("ActiveState") == "active"

    @property
    def main_pid(self) -> int | None:
        value = self.properties.get("MainPID", "0")
        return int(value) if value.isdigit() and int(value) > 0 else None

    def describe(self) -> str:
        p = self.properties
        state = f"{p.get('ActiveState', '?')} ({p.get('SubState', '?')})"
        pid = f", pid {self.main_pid}" if self.main_pid else ""
        code = p.get("ExecMainStatus")
        last = f", last exit status {code}" if code and code != "0" and not self.active else ""
        return f"{self.unit.name}: {state}{pid}{last}"

    def to_json(self) -> dict[str, Any]:
        return {"unit": self.unit.name, "user": self.unit.user, **dict(self.properties)}


def parse_show(text: str) -> dict[str, str]:
    """``Key=Value`` lines of ``systemctl show`` (pure)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def require_installed(unit: UnitRef, unit_dir: Path | None = None) -> Path:
    """The unit file, which must exist and carry mtpstudio's header.

    Raises:
        ServerError: the unit is not there or was not written by mtpstudio.
    """
    path = unit.unit_file(unit_dir)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        where = "user" if unit.user else "system"
        raise ServerError(
            f"there is no {where} unit {unit.name} at {path}",
            hint="Install it from the Service page or with `mtpstudio render`, or pass --user "
            "/ --system to look in the other place.",
        ) from None
    except OSError as exc:
        raise ServerError(f"cannot read {path}: {exc.strerror or exc}") from None
    if MARKER not in text:
        raise ServerError(
            f"{path} was not written by mtpstudio, so mtpstudio leaves it alone",
            hint=f"Use systemctl {'--user ' if unit.user else ''}directly for this unit.",
        )
    return path


def _failed(unit: UnitRef, what: str, result: RunResult) -> ServerError:
    hint = None
    if not unit.user and result.returncode not in (None, 0) and "access" in result.output.lower():
        hint = "A system unit needs root: run this as root or use a user unit."
    elif "Failed to connect to bus" in result.output or "not been booted" in result.output:
        hint = "systemd is not running for this session (a container or a non-systemd init?)."
    return ServerError(f"systemctl could not {what} {unit.name}: {result.reason()}", hint=hint)


def unit_status(unit: UnitRef, runner: Runner) -> UnitStatus:
    result = runner(show_argv(unit), SYSTEMCTL_TIMEOUT_S)
    if not result.ok:
        raise _failed(unit, "read the status of", result)
    return UnitStatus(unit, parse_show(result.stdout))


def start_unit(unit: UnitRef, runner: Runner) -> None:
    result = runner(systemctl_argv(unit, "start"), SYSTEMCTL_TIMEOUT_S)
    if not result.ok:
        raise _failed(unit, "start", result)


def stop_unit(unit: UnitRef, runner: Runner) -> None:
    result = runner(systemctl_argv(unit, "stop"), SYSTEMCTL_TIMEOUT_S)
    if not result.ok:
        raise _failed(unit, "stop", result)


def journal_tail(unit: UnitRef, runner: Runner, lines: int = 50) -> str:
    result = runner(journal_argv(unit, lines), SYSTEMCTL_TIMEOUT_S)
    if not result.ok:
        raise _failed(unit, "read the journal of", result)
    return result.stdout
