"""A placement that still holds when the desktop logs in after the service started.

A system unit starts at boot, before any desktop session: the engine's fit (``--fit on``) then
places its layers by the VRAM free at that moment, which includes the share the desktop takes
once the user logs in (the plan's ``desktop`` segment), and leaves only the fit target free for
the desktop and the engine's own growth. So a system unit whose plan leaves the placement to
the engine's fit gets the plan's own placement written out instead: the experts of whole layers
in RAM (``--n-cpu-moe N``, the fit's layers and its split one rounded up to whole layers) with
the fit off, the fewest that fit with the desktop counted (and not the programs that hold VRAM
while the plan is made: they do not run at boot). It holds at boot and after a login
alike, and the check before the engine starts (``prestart``) can compare the VRAM free then
with what this very placement needs. A user unit starts inside the session (the desktop is
already there) and keeps the engine's fit.

``moments`` says the two moments in words where they differ: at boot the desktop's share is
still free; after login the desktop holds it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mtpstudio.core.memory.budget import engine_fit_applies
from mtpstudio.core.memory.budget_types import Budget
from mtpstudio.core.planner.resolve import ResolvedPlan, budget_for, resolve
from mtpstudio.core.units import MIB


@dataclass(frozen=True)
class BootPlacement:
    """The placement a system unit runs, and why.

    Attributes:
        resolved: the plan with the placement written out (the unit's command comes from it).
        budget: its memory budget (the desktop counted).
        n_cpu_moe: the expert layers it keeps in RAM.
        fit_layers: the expert layers the engine's fit would keep in RAM with the desktop
            running (the plan's own budget).
        boot_fit: the budget of the engine's fit at boot (no desktop yet), where the plan's
            GPU is known.
        reason: one sentence for the unit's comments, the Service page and the CLI.
    """

    resolved: ResolvedPlan
    budget: Budget
    n_cpu_moe: int
    fit_layers: int
    boot_fit: Budget | None
    reason: str

    def words(self) -> list[str]:
        """The reason, then the two moments (``moments``): what the unit, the CLI and the
        Service page say."""
        return [self.reason, *moments(self)]


def needs_written_placement(resolved: ResolvedPlan) -> bool:
    """The plan leaves its placement to the engine's fit on one known GPU."""
    device = resolved.target.device
    return (
        resolved.devices is None
        and not resolved.cpu_only
        and engine_fit_applies(resolved.effective, device)
    )


def boot_placement(resolved: ResolvedPlan) -> BootPlacement | None:
    """The written-out placement for a system unit of ``resolved`` (None: the plan already
    names its placement, or has no GPU to place on)."""
    if not needs_written_placement(resolved):
        return None
    # the programs holding VRAM now are not counted: at boot they are not running, and a
    # placement that made room for them would keep the experts they crowd out in RAM for
    # good; the check before each start compares with what is free then
    others = resolved.target.device.other_bytes
    counted = without_other_programs(resolved)
    fit = budget_for(counted).fit
    if fit is None or fit.fails:
        return None
    model = resolved.model
    fit_layers = len(fit.cpu_expert_layers) + (1 if fit.partial is not None else 0)
    held = {"mtp.enabled": resolved.mtp.active, "runtime.moe": "n_cpu_moe"}
    if fit.n_gpu_layers is not None:
        held["runtime.n_gpu_layers"] = fit.n_gpu_layers
    start = max(0, min(model.n_layer, fit_layers - 1))
    for n in range(start, model.n_layer + 1):
        written = counted.with_changes({**held, "runtime.n_cpu_moe": n})
        written_budget = budget_for(written)
        if all(d.fits is not False for d in written_budget.devices):
            return BootPlacement(
                written,
                written_budget,
                n,
                fit_layers,
                _boot_fit(counted),
                _reason(resolved, n, written_budget, others),
            )
    return None


def without_other_programs(resolved: ResolvedPlan) -> ResolvedPlan:
    """``resolved`` for the machine without the VRAM other programs hold now (the desktop's
    still counted), resolved again, so that its ``with_changes`` keep it so."""
    pctx = resolved.pctx
    gpus = tuple(replace(g, other_bytes=0) for g in pctx.machine.gpus)
    if gpus == pctx.machine.gpus:
        return resolved
    return resolve(resolved.plan, replace(pctx, machine=replace(pctx.machine, gpus=gpus)))


def boot_placement_gap(resolved: ResolvedPlan, boot: BootPlacement | None) -> str | None:
    """Why a system unit of ``resolved`` keeps the engine's fit although it starts before
    the desktop (``boot``: its ``boot_placement``; None: the unit does not keep the fit, or
    needs no written placement)."""
    if boot is not None or not needs_written_placement(resolved):
        return None
    return (
        "This system unit keeps the engine's fit (--fit on): no placement fits "
        f"{resolved.target.device.id} with the desktop counted, even with every expert layer "
        "in RAM; the fit at boot may fill the desktop's share. Choose a smaller quant or "
        "context, or export a user unit, which starts after the login."
    )


def _boot_fit(resolved: ResolvedPlan) -> Budget | None:
    """The engine's fit as it would place the model at boot: the desktop's VRAM still free."""
    target = resolved.target
    if not target.device.desktop_bytes:
        return None
    at_boot = replace(target, device=replace(target.device, desktop_bytes=0))
    return budget_for(replace(resolved, target=at_boot))


def _desktop_mib(resolved: ResolvedPlan) -> int:
    return resolved.target.device.desktop_bytes // MIB


def _reason(resolved: ResolvedPlan, n: int, budget: Budget, others: int = 0) -> str:
    desktop = _desktop_mib(resolved)
    growth = budget.growth.bytes // MIB
    uncounted = (
        f" The {others // MIB:,} MiB other programs hold now are not counted (they do not "
        "run at boot, and the check before each start compares with what is free then)."
        if others
        else ""
    )
    return (
        f"The plan's placement written out (--n-cpu-moe {n}, the engine's fit off): a system "
        "unit starts at boot, before the desktop; the engine's fit would then count the "
        f"desktop's {desktop:,} MiB as free and fill it, leaving too little for the desktop "
        f"and the engine's own growth ({growth:,} MiB) once you log in. This placement counts "
        "the desktop, so it holds at boot and after a login alike." + uncounted
    )


def moments(boot: BootPlacement) -> list[str]:
    """The two moments of a system unit in words: at boot (no desktop yet) and after login,
    with what the engine's fit would have left at each."""
    device = boot.budget.devices[0]
    desktop = _desktop_mib(boot.resolved)
    free = (device.free_bytes or 0) // MIB
    lines = [
        f"At boot (before any login): {device.id} keeps {free + desktop:,} MiB free, the "
        f"desktop's {desktop:,} MiB among them; {boot.n_cpu_moe} expert layers in RAM.",
        f"After login: the desktop holds its {desktop:,} MiB; {free:,} MiB stay free beside the "
        "margin; the same placement.",
    ]
    if boot.boot_fit is not None and boot.boot_fit.fit is not None:
        boot_fit = boot.boot_fit.fit
        layers = len(boot_fit.cpu_expert_layers) + (1 if boot_fit.partial is not None else 0)
        if layers == boot.fit_layers:
            return lines  # the fit at boot places the model as after login: nothing to warn
        total = (device.total_bytes or 0) // MIB
        at_boot = boot.boot_fit.devices[0].segments
        used = (engine_bytes(at_boot) + at_boot.get("other_processes", 0)) // MIB + desktop
        lines.append(
            f"The engine's fit at boot would keep only {layers} expert layers in RAM (not "
            f"{boot.fit_layers}); after login the engine, the other programs and the desktop "
            f"would then need {used:,} of {total:,} MiB"
            + (
                f": {used - total:,} MiB too many."
                if used > total
                else f", only {total - used:,} MiB free where the plan keeps a "
                f"{device.segments.get('margin', 0) // MIB:,} MiB margin."
            )
        )
    return lines


NOT_THE_ENGINES = ("desktop", "other_processes", "margin")
"""The segments of a device's budget that are not the engine's own allocations."""


def engine_bytes(segments: dict[str, int]) -> int:
    """What the engine itself allocates on a device: its buffers, its driver context and its
    growth during the first prompts (not the desktop, the other programs or the margin)."""
    return sum(v for k, v in segments.items() if k not in NOT_THE_ENGINES)
