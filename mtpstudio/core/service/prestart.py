"""The check before the engine starts: is the VRAM the plan needs free, is the engine the build
the unit was made for.

A unit (``ExecStartPre=``) and the launch script run ``mtpstudio prestart`` before the engine.
Per GPU it reads the free memory now (NVML) and compares it with what the plan's placement
needs: the engine's own allocations and growth (``boot_placement.engine_bytes``), and the
desktop's share where the desktop does not hold it yet (the unit may start before the login).
Too little: one line in the journal saying what holds the memory, and the unit does not start
(``--short-vram refuse``, the default), starts and says so (``warn``), or starts the engine with
its own fit instead of the unit's placement and says so (``fit``: the check writes the fit's
words into the runtime folder's ``placement.env``, which the unit's ``$MTPSTUDIO_PLACEMENT``
reads; the launch script takes them from the check's output). The engine's size and
modification time are compared with the build the plan probed; another build is asked, bounded
in time, about the flags the unit passes, and the line names the ones it rejects and the command
that renders the unit again. Where NVML cannot be read the memory is not checked (said so).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from mtpstudio.core.detect.nvidia import NvidiaDetection
from mtpstudio.core.engines.flags import CANDIDATE_FLAGS
from mtpstudio.core.engines.probe import probe_flags
from mtpstudio.core.engines.spec import FlagNote, LaunchSpec
from mtpstudio.core.errors import RenderError
from mtpstudio.core.memory.budget_types import Budget, DeviceBudget
from mtpstudio.core.memory.machine import DESKTOP_CATEGORIES
from mtpstudio.core.memory.measured import HOST, predicted_segments
from mtpstudio.core.plan.choices import MoePlacement
from mtpstudio.core.planner.resolve import ResolvedPlan, launch_spec_for
from mtpstudio.core.quoting.env_file import env_file_assignment
from mtpstudio.core.runner import Runner
from mtpstudio.core.service.boot_placement import engine_bytes
from mtpstudio.core.units import MIB
from mtpstudio.helper.prestart_shape import (
    PLACEMENT_FILE,
    PLACEMENT_VAR,
    PLAIN_WORD,
    PrestartShape,
)

ASKABLE = frozenset(s.flag for s in CANDIDATE_FLAGS)
"""The flags a changed build can be asked about (the probe knows a valid value for each)."""
PROBE_BUDGET_S = 20.0
"""At most this long asking a changed engine build about the unit's flags."""
RERENDER = (
    "render the unit again for this build: mtpstudio export-unit (or the window's Service "
    "page) with your plan, then install it"
)


def python_for_check() -> str:
    """The interpreter this mtpstudio runs in (the unit's check runs the same one)."""
    return os.path.abspath(sys.executable)


def checked_devices(resolved: ResolvedPlan, budget: Budget) -> list[DeviceBudget]:
    """The GPUs of this computer the unit's checks look at (none: a CPU plan)."""
    if resolved.cpu_only:
        return []
    return [d for d in budget.devices if d.id != "CPU" and d.endpoint is None]


def prestart_for(
    resolved: ResolvedPlan, budget: Budget, unit_name: str, flags: Sequence[str]
) -> PrestartShape | None:
    """The check for the unit of ``resolved`` (None: a CPU plan, nothing to check)."""
    devices = checked_devices(resolved, budget)
    if not devices:
        return None
    desktop = resolved.target.device.desktop_bytes
    needs = tuple(
        (
            d.id,
            -(-engine_bytes(d.segments) // MIB),
            (desktop if d.id == resolved.target.device.id else 0) // MIB,
        )
        for d in devices
    )
    build = resolved.build
    probed = build.probed and build.build.size > 0
    server = resolved.effective.server
    return PrestartShape(
        python=python_for_check(),
        unit=unit_name,
        needs=needs,
        on_short=resolved.effective.outputs.short_vram.value,
        engine_size=build.build.size if probed else None,
        engine_mtime_ns=build.build.mtime_ns if probed else None,
        flags=tuple(dict.fromkeys(f for f in flags if f in ASKABLE)),
        host=server.host,
        port=server.port,
        loads=planned_load(budget, resolved),
    )


def planned_load(budget: Budget, resolved: ResolvedPlan) -> tuple[tuple[str, int], ...]:
    """Per device (GPUs first, then ``CPU``) the MiB of buffers the plan says the engine's
    load log shows: what the comparison after the load holds the log against."""
    per_device: dict[str, float] = {}
    for (_, device), mib in predicted_segments(budget, resolved.profile.memory).items():
        per_device[device] = per_device.get(device, 0.0) + mib
    order = sorted(per_device, key=lambda d: (d == HOST, d))
    return tuple((d, round(per_device[d])) for d in order if round(per_device[d]) > 0)


PLACEMENT_SETTINGS = frozenset(
    {"runtime.moe", "runtime.n_gpu_layers", "runtime.n_cpu_moe", "runtime.fit_margin_mib"}
)
"""The plan settings whose flags place the model (the fit, the GPU layers, the experts)."""


def placement_notes(spec: LaunchSpec) -> list[FlagNote]:
    """The flags of ``spec`` that place the model (what the engine's fit replaces)."""
    return [n for n in spec.flags if n.setting in PLACEMENT_SETTINGS]


def placement_words(spec: LaunchSpec) -> tuple[str, ...]:
    """The words of ``spec``'s placement flags, in the command's order."""
    return tuple(w for n in placement_notes(spec) for w in n.words)


def without_placement(spec: LaunchSpec) -> LaunchSpec:
    """``spec`` without its placement flags (they go into ``$MTPSTUDIO_PLACEMENT``)."""
    return replace(spec, flags=tuple(n for n in spec.flags if n.setting not in PLACEMENT_SETTINGS))


def with_fit_instead(
    shape: PrestartShape,
    spec: LaunchSpec,
    planned: ResolvedPlan,
    runs: ResolvedPlan,
    *,
    before_desktop: bool,
) -> PrestartShape:
    """The check of a ``--short-vram fit`` unit with the placement it may swap: the words of
    ``spec``'s placement, and the engine's fit of ``planned`` (the plan as the user made it)
    that replaces them, its margin grown by the desktop's share where the unit may start
    before the desktop (``before_desktop``: a system unit). ``runs`` is the plan the unit runs;
    when it already leaves the placement to the engine's fit, nothing is swapped.

    Raises:
        RenderError: the swap cannot be written (a split plan, an engine without a fit, a
            placement word that is not plain).
    """
    if shape.on_short != "fit" or runs.effective.runtime.moe is MoePlacement.FIT:
        return shape
    if planned.plan.is_split:
        raise RenderError(
            "--short-vram fit starts the engine's fit on one GPU, and this plan splits the model "
            "over several devices",
            hint="Use --short-vram refuse or warn for a split plan.",
        )
    desktop = planned.target.device.desktop_bytes // MIB if before_desktop else 0
    margin = planned.effective.runtime.fit_margin_mib + desktop
    fit = planned.with_changes(
        {
            "runtime.moe": "fit",
            "runtime.n_gpu_layers": None,
            "runtime.fit_margin_mib": margin,
            "mtp.enabled": planned.mtp.active,
        }
    )
    fit_spec, _ = launch_spec_for(fit)
    fallback = placement_words(fit_spec)
    placement = placement_words(spec)
    if not any(n.setting == "runtime.moe" for n in placement_notes(fit_spec)):
        raise RenderError(
            f"--short-vram fit needs the engine's fit, which {runs.build.build.version} does "
            "not have",
            hint="Use --short-vram refuse or warn with this engine.",
        )
    odd = [w for w in (*placement, *fallback) if not PLAIN_WORD.match(w)]
    if odd:
        raise RenderError(
            f"--short-vram fit puts the placement in a variable, and {odd[0][:40]!r} is not a "
            "plain word (letters, digits and .,:+=- only)",
            hint="Use --short-vram refuse or warn with this placement.",
        )
    return replace(shape, placement=placement, fallback=fallback)


@dataclass(frozen=True)
class CheckOutcome:
    """What the check found: the journal's lines, whether the engine may start, and whether
    it starts with the engine's fit instead of the unit's placement."""

    lines: tuple[str, ...]
    start: bool
    fit_instead: bool = False


def check_vram(shape: PrestartShape, detection: NvidiaDetection) -> CheckOutcome:
    """Each GPU's free memory now against what the plan needs (one line per GPU)."""
    who = f"mtpstudio: {shape.unit}"
    if detection.unavailable is not None:
        return CheckOutcome(
            (f"{who}: the free VRAM cannot be read ({detection.unavailable}); not checked.",),
            True,
        )
    lines, start, fit_instead = [], True, False
    for device, engine_mib, desktop_mib in shape.needs:
        gpu = next((g for g in detection.gpus if g.id == device), None)
        free = None if gpu is None else gpu.memory.free_bytes
        if gpu is None or free is None:
            lines.append(f"{who}: {device} is not among the GPUs NVML lists; not checked.")
            continue
        on_gpu = [p for p in detection.processes if p.gpu_id == device]
        held = sum(p.used_bytes or 0 for p in on_gpu if p.category in DESKTOP_CATEGORIES)
        to_come = max(0, desktop_mib - held // MIB)
        need = engine_mib + to_come
        have = free // MIB
        later = f" and the desktop's {to_come:,} MiB still to come at login" if to_come else ""
        head = f"{who}: {device} ({gpu.name}) has {have:,} MiB free; the engine needs "
        if have >= need:
            lines.append(f"{head}{engine_mib:,} MiB{later}: enough ({have - need:,} MiB spare).")
            continue
        holders = sorted(on_gpu, key=lambda p: -(p.used_bytes or 0))[:3]
        held_by = ", ".join(
            f"{p.name or '?'} (pid {p.pid}) {(p.used_bytes or 0) // MIB:,} MiB" for p in holders
        )
        short = (
            f"{head}{engine_mib:,} MiB{later}: {need - have:,} MiB short; held by "
            f"{held_by or 'no process the driver names'}; "
        )
        if shape.swaps_placement:
            fit_instead = True
            lines.append(
                short + f"starting with the engine's fit instead ({' '.join(shape.fallback)}) "
                "of the planned placement, as the plan says (--short-vram fit): it places by "
                "what is free now and leaves the desktop's share and the margin free; more of "
                "the model may stay in RAM, so it may decode slower."
            )
        elif shape.on_short == "fit":
            lines.append(
                short + "starting all the same, as the plan says (--short-vram fit): the "
                "engine's fit places the model by what is free now."
            )
        elif shape.on_short == "warn":
            lines.append(
                short + "starting all the same, as the plan says (--short-vram warn): the "
                "engine may run out of memory at its load or its first prompts."
            )
        else:
            start = False
            lines.append(
                short + "not starting: the engine would run out of memory at its load or its "
                "first prompts (free what holds the memory, or plan and export the unit again "
                "for what is free now; --short-vram warn starts it all the same, --short-vram "
                "fit with the engine's fit)."
            )
    return CheckOutcome(tuple(lines), start, fit_instead)


def check_engine(
    shape: PrestartShape,
    engine: Path,
    runner: Runner,
) -> CheckOutcome:
    """The engine binary against the build the unit was made for; a changed build is asked
    about the unit's flags (bounded in time). It starts either way where it can run: the
    engine itself then stops on a flag it rejects, after this line said which."""
    who = f"mtpstudio: {shape.unit}"
    try:
        now = engine.stat()
    except OSError as exc:
        return CheckOutcome(
            (f"{who}: the engine {engine} cannot be read ({exc.strerror}); {RERENDER}.",), False
        )
    if shape.engine_size is None or shape.engine_mtime_ns is None:
        return CheckOutcome((), True)
    if (now.st_size, now.st_mtime_ns) == (shape.engine_size, shape.engine_mtime_ns):
        return CheckOutcome((), True)
    specs = [s for s in CANDIDATE_FLAGS if s.flag in shape.flags]
    timeout = max(1.0, PROBE_BUDGET_S / max(1, len(specs)))
    answers = probe_flags(engine, specs, runner, timeout=min(timeout, 10.0))
    rejected = [a.flag for a in answers if not a.accepted]
    changed = (
        f"{who}: {engine} is another build than the unit was made for (size {now.st_size:,} "
        f"bytes, was {shape.engine_size:,})"
    )
    if rejected:
        return CheckOutcome(
            (f"{changed}; it rejects {', '.join(rejected)}; {RERENDER}.",),
            True,
        )
    return CheckOutcome(
        (f"{changed}; it accepts the {len(answers)} flags asked about; {RERENDER} to be sure.",),
        True,
    )


def run_prestart(
    shape: PrestartShape,
    engine: Path,
    detection: NvidiaDetection,
    runner: Runner,
) -> CheckOutcome:
    """Both checks, the engine's first."""
    built = check_engine(shape, engine, runner)
    memory = check_vram(shape, detection)
    return CheckOutcome(
        built.lines + memory.lines, built.start and memory.start, memory.fit_instead
    )


def placement_file(runtime_dir: str | None) -> Path | None:
    """The file the check writes the engine's fit into (None: the unit has no runtime
    folder, e.g. the check run by hand)."""
    return None if not runtime_dir else Path(runtime_dir) / PLACEMENT_FILE


def write_fit_instead(shape: PrestartShape, outcome: CheckOutcome, runtime_dir: str | None) -> str:
    """For a unit: the engine's fit into ``placement.env`` when the outcome says so (written
    whole: a new file renamed over the old), and any file of an earlier start removed
    otherwise. Returns a line for the journal when it cannot (the engine then does not start
    with a placement that does not fit)."""
    path = placement_file(runtime_dir)
    if not shape.swaps_placement:
        return ""
    if path is None:
        return (
            f"mtpstudio: {shape.unit}: no runtime folder ($RUNTIME_DIRECTORY), so the engine's "
            "fit cannot be handed to the engine; not starting."
            if outcome.fit_instead
            else ""
        )
    try:
        if not outcome.fit_instead:
            path.unlink(missing_ok=True)
            return ""
        text = (
            "# Written by mtpstudio prestart: the VRAM was short, so this start uses the "
            "engine's fit.\n" + env_file_assignment(PLACEMENT_VAR, " ".join(shape.fallback)) + "\n"
        )
        part = path.with_name(f".{path.name}.part")
        part.write_text(text, encoding="utf-8")
        os.replace(part, path)
    except OSError as exc:
        return (
            f"mtpstudio: {shape.unit}: the engine's fit cannot be written to {path} "
            f"({exc.strerror}); not starting."
        )
    return ""
