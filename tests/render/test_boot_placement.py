"""A system unit starts at boot, before the desktop: for the published setup (RTX 4070 SUPER,
desktop 1,024 MiB) its placement is the plan's, written out, so the desktop's share and the
engine's growth stay free after a login; a user unit keeps the engine's fit; a plan that names
its placement keeps it. The unit says which and why, and the two moments are in words."""

from __future__ import annotations

from dataclasses import replace

from support.plans import published_resolved
from support.rendering import unit_plan_text

from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.planner.resolve import ResolvedPlan, budget_for, resolve
from mtpstudio.core.service.boot_placement import engine_bytes
from mtpstudio.core.service.render import UnitScope
from mtpstudio.core.service.service_files import unit_plan
from mtpstudio.core.units import MIB


def published(**changes: object) -> ResolvedPlan:
    resolved: ResolvedPlan = published_resolved(**changes)
    return resolved


def flag_value(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_system_unit_writes_out_a_placement_that_leaves_the_desktop_its_share() -> None:
    resolved = published()
    desktop = resolved.target.device.desktop_bytes
    assert desktop == 1024 * MIB  # the catalogue card's desktop
    made = unit_plan(resolved, UnitScope.SYSTEM)
    assert made.boot is not None
    argv = made.spec.argv
    assert flag_value(argv, "--fit") == "off"
    n = int(flag_value(argv, "--n-cpu-moe"))
    assert n == made.boot.n_cpu_moe >= made.boot.fit_layers - 1
    # after login: the desktop's share counted, the growth counted, the margin kept
    device = made.boot.budget.devices[0]
    assert device.segments["desktop"] == desktop and device.fits
    assert device.segments["runtime_growth"] > 0
    assert (device.free_bytes or 0) >= 0
    # one layer fewer in RAM would not fit: the fewest that hold
    fewer = budget_for(made.resolved.with_changes({"runtime.n_cpu_moe": n - 1}))
    assert fewer.devices[0].fits is False
    # the engine's fit at boot (no desktop yet) would leave less than the margin after login
    boot_fit = made.boot.boot_fit
    assert boot_fit is not None and boot_fit.fit is not None
    at_boot = boot_fit.devices[0]
    after_login = engine_bytes(at_boot.segments) + desktop
    total = device.total_bytes or 0
    assert total - after_login < device.segments["margin"]
    assert len(boot_fit.fit.cpu_expert_layers) < n  # it keeps more experts on the card


def test_the_unit_says_why_and_the_two_moments() -> None:
    made = unit_plan(published(), UnitScope.SYSTEM)
    assert made.boot is not None
    text = unit_plan_text(made)
    comments = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    assert "The plan's placement written out" in comments
    assert "before the desktop" in comments
    at_boot, after, fit_line = made.notes[1:4]
    assert at_boot.startswith("At boot (before any login): CUDA0 keeps ")
    assert after.startswith("After login: the desktop holds its 1,024 MiB")
    assert fit_line.startswith("The engine's fit at boot would keep only ")
    free = (made.boot.budget.devices[0].free_bytes or 0) // MIB
    assert f"keeps {free + 1024:,} MiB free" in at_boot and f"{free:,} MiB stay free" in after
    # the check before the start needs this placement's own allocations, the desktop beside
    engine_mib = -(-engine_bytes(made.boot.budget.devices[0].segments) // MIB)
    assert f"--need CUDA0={engine_mib},1024" in text
    assert "ExecStartPre=" in text


def test_a_user_unit_keeps_the_engines_fit() -> None:
    made = unit_plan(published(), UnitScope.USER)
    assert made.boot is None
    assert flag_value(made.spec.argv, "--fit") == "on"
    assert flag_value(made.spec.argv, "--fit-target") == "1024"
    assert made.prestart is not None  # the check runs before a user unit's engine too


def test_a_plan_that_names_its_placement_keeps_it() -> None:
    resolved = published(**{"runtime.moe": "n_cpu_moe", "runtime.n_cpu_moe": 30})
    made = unit_plan(resolved, UnitScope.SYSTEM)
    assert made.boot is None
    assert flag_value(made.spec.argv, "--n-cpu-moe") == "30"


def test_a_cpu_plan_has_nothing_to_place_or_check() -> None:
    made = unit_plan(published(device="cpu"), UnitScope.SYSTEM)
    assert made.boot is None and made.prestart is None


def test_the_plan_shows_both_moments_of_a_system_unit() -> None:
    from support.cli import run_cli

    shown = run_cli("plan", "--demo")
    assert shown.returncode == 0, shown.stderr
    block = shown.stdout.split("As a system unit (starts at boot, before the desktop):\n", 1)
    assert len(block) == 2, shown.stdout
    lines = block[1].splitlines()[:4]
    assert lines[0].startswith("  The plan's placement written out (--n-cpu-moe ")
    assert lines[1].startswith("  At boot (before any login): CUDA0 keeps ")
    assert lines[2].startswith("  After login: the desktop holds its 1,024 MiB")
    cpu = run_cli("plan", "--demo", "--gpu", "cpu")
    assert "As a system unit" not in cpu.stdout  # nothing to place on a card


def with_device(resolved: ResolvedPlan, **device: int) -> ResolvedPlan:
    target = resolved.target
    return replace(resolved, target=replace(target, device=replace(target.device, **device)))


def on_this_machine(resolved: ResolvedPlan, other_mib: int) -> ResolvedPlan:
    """``resolved`` for a machine whose own GPU (the same card, detected as CUDA0) has the
    desktop on it and other programs holding ``other_mib``."""
    device = replace(resolved.target.device, id="CUDA0", other_bytes=other_mib * MIB)
    pctx = resolved.pctx
    machine = replace(pctx.machine, gpus=(device,))
    return resolve(plan_with(resolved.plan, {"device": "CUDA0"}), replace(pctx, machine=machine))


def test_programs_holding_the_vram_now_do_not_take_the_units_placement_away() -> None:
    resolved = published()
    plain = unit_plan(on_this_machine(resolved, 0), UnitScope.SYSTEM)
    assert plain.boot is not None and plain.prestart is not None
    total = resolved.target.device.total_bytes or 0
    held_mib = (total - 2048 * MIB) // MIB  # a render holds all but 2 GiB
    held = on_this_machine(resolved, held_mib)
    assert held.target.device.other_bytes == held_mib * MIB
    crowded = budget_for(held).fit
    assert crowded is not None and crowded.n_gpu_layers == 0  # the fit now: all in RAM
    made = unit_plan(held, UnitScope.SYSTEM)
    assert made.boot is not None  # the placement of a boot without that render
    assert made.boot.n_cpu_moe == plain.boot.n_cpu_moe
    assert made.spec.argv == plain.spec.argv
    assert f"The {held_mib:,} MiB other programs hold now are not counted" in made.boot.reason
    assert "not counted" not in plain.boot.reason
    # the check before each start still compares with what is free then
    assert made.prestart is not None and made.prestart.needs == plain.prestart.needs


def test_a_system_unit_that_cannot_hold_a_placement_says_it_keeps_the_fit() -> None:
    """ik's fit stops where a MoE model does not fit with every expert in RAM: no placement
    to write out, and the unit says so."""
    resolved = published(**{"engine.flavour": "ik"})
    device = replace(resolved.target.device, id="CUDA0", total_bytes=1536 * MIB)
    machine = replace(resolved.pctx.machine, gpus=(device,))
    small = resolve(
        plan_with(resolved.plan, {"device": "CUDA0"}), replace(resolved.pctx, machine=machine)
    )
    fit = budget_for(small).fit
    assert fit is not None and fit.fails  # ik: "Unable to auto-fit model"
    made = unit_plan(small, UnitScope.SYSTEM)
    assert made.boot is None
    assert "--fit" in made.spec.argv and "--n-cpu-moe" not in made.spec.argv  # ik's fit
    assert made.warnings[0].startswith("This system unit keeps the engine's fit (--fit on): ")
    assert "export a user unit" in made.warnings[0]
    user = unit_plan(small, UnitScope.USER)
    assert not any("keeps the engine's fit" in w for w in user.warnings)
