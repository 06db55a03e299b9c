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

from mtpstudio.core.desktop.session_files import SESSION_VARIABLES
from mtpstudio.core.detect.host import kwin_compositing
from mtpstudio.core.detect.models import DetectionReport
from mtpstudio.core.memory.machine import DESKTOP_CATEGORIES
from mtpstudio.core.runner import Runner
from mtpstudio.core.units import MIB

TOOL_TIMEOUT_S = 10.0


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


SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swrast", "lavapipe")
"""Mesa's CPU renderers (``swrast`` is the EGL driver name eglinfo gives for them)."""
EXIT_SOFTWARE, EXIT_HARDWARE, EXIT_UNKNOWN = 0, 1, 3
"""``verify-session`` exit status: confirmed software rendering, hardware rendering seen, or
nothing could confirm it (2 stays the CLI's bad-input status)."""
DBUS_TOOLS = "qdbus6, qdbus, gdbus or busctl"
_EGL_PLATFORM = re.compile(r"^(\w[\w ]*) platform:\s*$")
_EGL_DRIVER = re.compile(r"EGL driver name:\s*(.+)")
_EGL_VENDOR = re.compile(r"EGL vendor string:\s*(.+)")
_GL_RENDERER = re.compile(
    r"OpenGL (?:core profile |compatibility profile |ES profile )?renderer(?: string)?:\s*(.+)"
)


def is_software(renderer: str) -> bool:
    """The renderer is one of Mesa's CPU renderers."""
    return any(name in renderer.lower() for name in SOFTWARE_RENDERERS)


@dataclass(frozen=True)
class GlReport:
    """One GL tool's answer: the renderer strings, or why there is none."""

    tool: str
    renderers: tuple[str, ...] = ()
    problem: str | None = None
    missing: bool = False  # the tool is not installed


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

    def _compositor(self) -> tuple[bool | None, str]:
        comp = self.compositing
        if comp is None:
            return None, self.kwin_problem or f"no D-Bus tool ({DBUS_TOOLS}) to ask KWin"
        if "qpainter" in comp.lower():
            return True, f"KWin composites with {comp} (on the CPU)"
        if self.kwin_renderer:
            return is_software(self.kwin_renderer), (
                f"KWin composites with {comp} on {self.kwin_renderer}"
            )
        return None, f"KWin composites with {comp} and did not say on which renderer"

    def _clients(self) -> tuple[bool | None, str]:
        seen = [(gl.tool, r) for gl in self.gl for r in gl.renderers]
        hardware = [f"{r} ({tool})" for tool, r in seen if not is_software(r)]
        if hardware:
            return False, "GL clients render on " + "; ".join(hardware)
        if seen:
            return True, "GL clients render with " + "; ".join(f"{r} ({t})" for t, r in seen)
        return None, "no GL tool reached a session display"

    @property
    def software_rendering(self) -> str:
        """``yes`` (KWin composites on the CPU, and no GL client renders on a GPU), ``no`` (a
        GPU renderer was seen) or ``unknown`` (KWin's answer is missing)."""
        compositor, _ = self._compositor()
        clients, _ = self._clients()
        if compositor is False or clients is False:
            return "no"
        return "yes" if compositor else "unknown"

    @property
    def verdict_reason(self) -> str:
        """The evidence behind the verdict, one sentence."""
        (_, comp_why), (clients, clients_why) = self._compositor(), self._clients()
        if self.software_rendering == "no" and clients is False:
            return f"{clients_why}; {comp_why}" if self.compositing else clients_why
        return f"{comp_why}; {clients_why}"

    @property
    def exit_code(self) -> int:
        return {"yes": EXIT_SOFTWARE, "no": EXIT_HARDWARE}.get(
            self.software_rendering, EXIT_UNKNOWN
        )

    def verdict_line(self) -> str:
        return f"Software rendering: {self.software_rendering} - {self.verdict_reason}"

    def missing_tools(self) -> str | None:
        """One line naming the tools that are not installed, and their packages."""
        missing = [gl.tool for gl in self.gl if gl.missing]
        parts = [f"{' and '.join(missing)} (mesa-utils)"] if missing else []
        if self.compositing is None and self.kwin_problem is None:
            parts.append(f"a D-Bus tool to ask KWin ({DBUS_TOOLS})")
        return f"Not installed: {'; '.join(parts)}" if parts else None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["software_rendering"] = self.software_rendering
        data["verdict_reason"] = self.verdict_reason
        data["exit_code"] = self.exit_code
        return data

    def lines(self) -> list[str]:
        """The report as plain sentences, the verdict first."""
        out = [
            self.verdict_line(),
            f"Session: {self.session or 'unknown (DESKTOP_SESSION is not set)'}",
        ]
        if self.compositing:
            renderer = f", renderer {self.kwin_renderer}" if self.kwin_renderer else ""
            out.append(f"KWin compositing: {self.compositing}{renderer}")
        elif self.kwin_problem:
            out.append(f"KWin compositing: unknown ({self.kwin_problem})")
        for gl in self.gl:
            if gl.renderers:
                out.append(f"{gl.tool}: {'; '.join(gl.renderers)}")
            elif not gl.missing:
                out.append(f"{gl.tool}: {gl.problem}")
        missing = self.missing_tools()
        if missing:
            out.append(missing)
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


def egl_platforms(text: str) -> dict[str, str]:
    """Platform -> renderer from ``eglinfo`` output: the GL renderer where it prints one
    (mesa-demos 9), else the EGL driver and vendor (Debian 12's eglinfo 8.5, which ignores
    ``-B`` and prints no GL renderer); platforms that did not initialise are left out."""
    found: dict[str, str] = {}
    for block in re.split(r"\n(?=\w[\w ]* platform:\s*\n)", "\n" + text):
        lines = block.strip("\n").split("\n", 1)
        head = _EGL_PLATFORM.match(lines[0])
        if head is None or len(lines) < 2 or "eglInitialize failed" in lines[1]:
            continue
        body = lines[1]
        gl = _GL_RENDERER.search(body)
        driver, vendor = _EGL_DRIVER.search(body), _EGL_VENDOR.search(body)
        if gl:
            found[head.group(1)] = gl.group(1).strip()
        elif driver:
            by = f" ({vendor.group(1).strip()})" if vendor else ""
            found[head.group(1)] = f"EGL driver {driver.group(1).strip()}{by}"
        elif vendor:
            found[head.group(1)] = f"EGL vendor {vendor.group(1).strip()}"
    return found


def _session_platform(platforms: Mapping[str, str], environ: Mapping[str, str]) -> str | None:
    for name, variable in (("Wayland", "WAYLAND_DISPLAY"), ("X11", "DISPLAY")):
        if environ.get(variable) and name in platforms:
            return name
    return None


def _glxinfo(runner: Runner, environ: Mapping[str, str]) -> GlReport:
    result = runner(("glxinfo", "-B"), TOOL_TIMEOUT_S)
    if result.error is not None:
        return GlReport("glxinfo", missing=True, problem="not installed (mesa-utils)")
    found = tuple(dict.fromkeys(m.strip() for m in _GL_RENDERER.findall(result.stdout)))
    if found:
        return GlReport("glxinfo", found)
    if "unable to open display" in result.output:
        display = environ.get("DISPLAY")
        why = (
            f"cannot open the X display {display}"
            if display
            else "no X display (DISPLAY is not set)"
        )
        return GlReport("glxinfo", problem=why)
    return GlReport("glxinfo", problem=result.reason(TOOL_TIMEOUT_S) or "no renderer string")


def _eglinfo(runner: Runner, environ: Mapping[str, str]) -> GlReport:
    """The renderer of the session's own EGL platform (Wayland, else X11); Debian's eglinfo
    8.5 exits non-zero when any platform fails, so its output is read whatever the status."""
    result = runner(("eglinfo", "-B"), TOOL_TIMEOUT_S)
    if result.error is not None:
        return GlReport("eglinfo", missing=True, problem="not installed (mesa-utils)")
    if result.timed_out:
        return GlReport("eglinfo", problem=result.reason(TOOL_TIMEOUT_S))
    platforms = egl_platforms(result.stdout)
    chosen = _session_platform(platforms, environ)
    if chosen is not None:
        return GlReport("eglinfo", (f"{platforms[chosen]}, {chosen} platform",))
    offscreen = "; ".join(f"{name}: {r}" for name, r in platforms.items())
    why = "no Wayland or X11 display in this session"
    return GlReport("eglinfo", problem=f"{why} (off-screen {offscreen})" if offscreen else why)


def gl_renderers(runner: Runner, environ: Mapping[str, str] | None = None) -> tuple[GlReport, ...]:
    """``glxinfo -B`` and ``eglinfo -B``: their renderer strings (absence is fine)."""
    env = environ if environ is not None else {}
    return _glxinfo(runner, env), _eglinfo(runner, env)


def leaked_variables(runner: Runner) -> tuple[dict[str, str], str | None]:
    """Session variables present in ``systemctl --user show-environment`` (and why unknown)."""
    result = runner(["systemctl", "--user", "show-environment"], TOOL_TIMEOUT_S)
    if result.error is not None:
        return {}, "environment unknown (systemctl is not installed)"
    if not result.ok and not result.timed_out:
        return {}, "environment unknown (no systemd user manager answers in this login)"
    if not result.ok:
        return {}, f"environment unknown (systemctl {result.reason(TOOL_TIMEOUT_S)})"
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
        gl=gl_renderers(runner, environ),
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
