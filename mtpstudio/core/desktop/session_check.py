"""Before/after for a reclaim session: the desktop's VRAM now, and what ``verify-session`` sees.

``desktop_vram`` turns a detection report into the measurement stored next to the helper's
manifest when a session is applied. ``check_session`` runs inside the new session: KWin's
compositing type and renderer (D-Bus), ``glxinfo -B`` / ``eglinfo -B`` when installed, the
desktop's VRAM now against the stored figure, and software-rendering variables that leaked into
the systemd user manager (they would reach a user-unit llama-server).
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from mtpstudio.core.detect.host import kwin_compositing
from mtpstudio.core.detect.models import DetectionReport
from mtpstudio.core.memory.machine import DESKTOP_CATEGORIES
from mtpstudio.core.runner import Runner
from mtpstudio.core.service.render import SESSION_VARIABLES
from mtpstudio.core.units import MIB

TOOL_TIMEOUT_S = 10.0
GL_TOOLS: tuple[tuple[str, ...], ...] = (("glxinfo", "-B"), ("eglinfo", "-B"))
_RENDERER = re.compile(r"OpenGL renderer string:\s*(.+)")


def desktop_vram(report: DetectionReport, session: str | None = None) -> dict[str, Any]:
    """The desktop processes' VRAM on the dedicated GPUs (the iGPU's shared memory is not the
    point), from detection; stored as the 'before' figure."""
    shared = {g.id for g in report.gpus if g.integrated}
    processes = [
        {
            "gpu_id": p.gpu_id,
            "pid": p.pid,
            "name": p.name,
            "category": p.category.value,
            "used_bytes": p.used_bytes,
        }
        for p in report.processes
        if p.category in DESKTOP_CATEGORIES and p.gpu_id not in shared
    ]
    known = [p["used_bytes"] for p in processes if isinstance(p["used_bytes"], int)]
    return {
        "measured_at": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "session": session,
        "gpus": [
            {"id": g.id, "name": g.name, "used_bytes": g.memory.used_bytes} for g in report.gpus
        ],
        "desktop_bytes": sum(known),
        "desktop_processes": processes,
        "unknown_processes": len(processes) - len(known),
        "problems": list(report.problems),
    }


@dataclass(frozen=True)
class GlReport:
    """One GL tool's answer: the renderer strings, or why there is none."""

    tool: str
    renderers: tuple[str, ...] = ()
    problem: str | None = None


@dataclass(frozen=True)
class SessionCheckReport:
    """What ``mtpstudio verify-session`` found."""

    session: str | None
    compositing: str | None
    kwin_renderer: str | None
    kwin_problem: str | None
    gl: tuple[GlReport, ...]
    desktop_bytes_now: int
    desktop_bytes_before: int | None
    measured_before: str | None
    leaked: Mapping[str, str]
    user_manager: str | None = None  # why the user manager's environment is unknown
    notes: tuple[str, ...] = field(default=())

    @property
    def software_rendering(self) -> bool:
        """KWin composites with QPainter or on llvmpipe."""
        comp = (self.compositing or "").lower()
        rend = (self.kwin_renderer or "").lower()
        return "qpainter" in comp or "llvmpipe" in rend

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["software_rendering"] = self.software_rendering
        return data

    def lines(self) -> list[str]:
        """The report as plain sentences."""
        out = [f"Session: {self.session or 'unknown (DESKTOP_SESSION is not set)'}"]
        if self.compositing:
            renderer = f", renderer {self.kwin_renderer}" if self.kwin_renderer else ""
            out.append(f"KWin compositing: {self.compositing}{renderer}")
        else:
            out.append(f"KWin compositing: unknown ({self.kwin_problem or 'KWin did not answer'})")
        for gl in self.gl:
            if gl.renderers:
                out.append(f"{gl.tool}: {'; '.join(gl.renderers)}")
            else:
                out.append(f"{gl.tool}: {gl.problem}")
        now = f"{self.desktop_bytes_now / MIB:.0f} MiB"
        if self.desktop_bytes_before is None:
            out.append(f"Desktop VRAM now: {now} (no figure stored from before the session)")
        else:
            before = self.desktop_bytes_before / MIB
            saved = (self.desktop_bytes_before - self.desktop_bytes_now) / MIB
            out.append(
                f"Desktop VRAM now: {now}, before: {before:.0f} MiB "
                f"(measured {self.measured_before}); {saved:.0f} MiB given back"
            )
        if self.user_manager:
            out.append(f"systemd user manager: {self.user_manager}")
        elif self.leaked:
            names = ", ".join(f"{k}={v}" for k, v in self.leaked.items())
            out.append(
                f"Leaked into the systemd user manager: {names} - a user-unit llama-server "
                "would inherit them (mtpstudio's user units unset them; others may not)"
            )
        else:
            out.append("No software-rendering variable leaked into the systemd user manager")
        out += list(self.notes)
        return out


def gl_renderers(runner: Runner) -> tuple[GlReport, ...]:
    """``glxinfo -B`` and ``eglinfo -B``: their renderer strings (absence is fine)."""
    reports = []
    for argv in GL_TOOLS:
        result = runner(argv, TOOL_TIMEOUT_S)
        if result.error is not None:
            reports.append(GlReport(argv[0], problem="not installed (mesa-utils)"))
            continue
        found = tuple(dict.fromkeys(m.strip() for m in _RENDERER.findall(result.stdout)))
        if found:
            reports.append(GlReport(argv[0], found))
        else:
            problem = result.reason(TOOL_TIMEOUT_S) or "no renderer string in its output"
            reports.append(GlReport(argv[0], problem=problem))
    return tuple(reports)


def leaked_variables(runner: Runner) -> tuple[dict[str, str], str | None]:
    """Session variables present in ``systemctl --user show-environment`` (and why unknown)."""
    result = runner(["systemctl", "--user", "show-environment"], TOOL_TIMEOUT_S)
    if not result.ok:
        return {}, f"environment unknown ({result.reason(TOOL_TIMEOUT_S)})"
    env: dict[str, str] = {}
    for line in result.stdout.splitlines():
        name, sep, value = line.partition("=")
        if sep and name in SESSION_VARIABLES:
            env[name] = value
    return env, None


def check_session(
    report: DetectionReport,
    runner: Runner,
    environ: Mapping[str, str],
    before: Mapping[str, Any] | None,
    kwin_timeout: float = TOOL_TIMEOUT_S,
) -> SessionCheckReport:
    """Everything ``verify-session`` reports, from injected sources."""
    compositing, renderer, problem = kwin_compositing(runner, kwin_timeout)
    now = desktop_vram(report)
    leaked, manager = leaked_variables(runner)
    notes: list[str] = []
    before_bytes = before.get("desktop_bytes") if before else None
    if before and before.get("problems"):
        notes.append(
            "The stored figure was measured with problems: " + "; ".join(before["problems"])
        )
    if report.problems:
        notes.append("Now: " + "; ".join(report.problems))
    return SessionCheckReport(
        session=environ.get("DESKTOP_SESSION") or None,
        compositing=compositing,
        kwin_renderer=renderer,
        kwin_problem=problem,
        gl=gl_renderers(runner),
        desktop_bytes_now=int(now["desktop_bytes"]),
        desktop_bytes_before=before_bytes if isinstance(before_bytes, int) else None,
        measured_before=str(before.get("measured_at")) if before else None,
        leaked=leaked,
        user_manager=manager,
        notes=tuple(notes),
    )


def measurement_candidates(session: str | None, names: Sequence[str]) -> list[str]:
    """Stored measurement files to try: this session's first, then the others."""
    mine = f"desktop-vram-{session}.json" if session else ""
    first = [mine] if mine in names else []
    return first + sorted(n for n in names if n != mine)
