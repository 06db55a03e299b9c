"""``mtpstudio apply|revert|status|verify-session``: install reclaim sessions, units and the
NVIDIA profile through the helper, undo them, list them, and check a session from inside."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mtpstudio.core.errors import MtpStudioError


def register(sub: Any) -> None:
    """Add ``apply``, ``revert``, ``status`` and ``verify-session`` to the subcommands."""
    p_apply = sub.add_parser(
        "apply",
        help="install a VRAM-saving login session, the service unit or the NVIDIA profile",
        description="Install files through mtpstudio-helper (pkexec), atomically and revertibly.",
    )
    what = p_apply.add_subparsers(dest="what", metavar="WHAT", required=True)

    p_session = what.add_parser("session", help="the login session that keeps Plasma off VRAM")
    p_session.add_argument(
        "--variant",
        choices=["llvmpipe", "igpu", "x11"],
        help="software rendering, display on the iGPU, or X11 (default: from detection)",
    )
    _common(p_session)
    p_session.set_defaults(func=cmd_apply_session)

    p_unit = what.add_parser("unit", help="the systemd unit that runs llama-server")
    p_unit.add_argument("--plan", type=Path, required=True, help="the plan file")
    scope = p_unit.add_mutually_exclusive_group()
    scope.add_argument("--user", dest="scope", action="store_const", const="user",
                       help="a user unit in ~/.config/systemd/user (no root needed)")  # fmt: skip
    scope.add_argument("--system", dest="scope", action="store_const", const="system",
                       help="a system unit in /etc/systemd/system (default)")  # fmt: skip
    p_unit.add_argument("--account", help="account a system unit runs as (default: you)")
    p_unit.add_argument(
        "--replace",
        action="store_true",
        help="replace an installed unit or env file that differs (without it the diff is shown "
        "and nothing is written)",
    )
    _common(p_unit)
    p_unit.set_defaults(func=cmd_apply_unit, scope="system")

    p_nv = what.add_parser("nvidia-profile", help="the driver profile GLVidHeapReuseRatio=0")
    _common(p_nv)
    p_nv.set_defaults(func=cmd_apply_nvidia)

    p_revert = sub.add_parser(
        "revert",
        help="undo what mtpstudio installed",
        description="Put back what `mtpstudio apply` changed: WHAT is session, unit, "
        "nvidia-profile or all.",
    )
    p_revert.add_argument(
        "what",
        nargs="?",
        choices=["session", "unit", "nvidia-profile", "all"],
        help="what to undo (without it: what is installed, and how to undo it)",
    )
    p_revert.add_argument("--root", type=Path, help="treat DIR as / (tests, packaging)")
    _setup_option(p_revert)
    p_revert.set_defaults(func=cmd_revert)

    p_setup = sub.add_parser(
        "setup-helper",
        help="set up the privileged helper and its polkit policy (one administrator password)",
        description="Copy mtpstudio's helper root-owned to /usr/lib/mtpstudio and install its "
        "polkit policy, through pkexec. `apply` and `revert` offer the same when they find no "
        "helper; a package or packaging/install.sh installs it too.",
    )
    p_setup.set_defaults(func=cmd_setup_helper)

    p_status = sub.add_parser("status", help="what mtpstudio installed, with paths and hashes")
    p_status.add_argument("--root", type=Path, help="treat DIR as / (tests, packaging)")
    p_status.add_argument("--json", action="store_true", help="print JSON")
    p_status.set_defaults(func=cmd_status)

    p_verify = sub.add_parser(
        "verify-session",
        help="inside the new session: renderer, desktop VRAM, leaked variables",
        description="Ask KWin (D-Bus) and glxinfo/eglinfo how this session renders, compare the "
        "desktop's VRAM with the figure kept at install time, and look for software-rendering "
        "variables left in the systemd user manager. The first line is the verdict.",
        epilog="Exit status: 0 software rendering confirmed; 1 a GPU renderer was seen; "
        "3 nothing could confirm it (KWin did not answer); 2 bad input.",
    )
    p_verify.add_argument("--json", action="store_true", help="print JSON")
    p_verify.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    p_verify.set_defaults(func=cmd_verify_session)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dry-run", action="store_true", help="print the files and a diff; change nothing"
    )
    p.add_argument("--root", type=Path, help="treat DIR as / (runs the helper code in-process)")
    _setup_option(p)


def _setup_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set-up-helper",
        action="store_true",
        help="when the helper is not set up, set it up first without asking (the same "
        "administrator password covers both)",
    )


def _root(args: argparse.Namespace) -> Path | None:
    root: Path | None = getattr(args, "root", None)
    if root is None:
        return None
    if not root.is_dir():
        raise MtpStudioError(f"--root {root} is not a folder", hint="Create it first.")
    return root.resolve()


# --------------------------------------------------------------------------------------------
# detection


def _detect(include_engines: bool = False) -> Any:
    from mtpstudio.core.detect.gather import DetectionSources
    from mtpstudio.core.usecases.machine import detect_all

    return detect_all(DetectionSources.system(), include_engines=include_engines)


# --------------------------------------------------------------------------------------------
# the helper


def _ask(question: str) -> bool:
    """A yes/no question on the terminal (no terminal: no)."""
    if not sys.stdin.isatty():
        return False
    try:
        answer = input(question)
    except EOFError:
        return False
    return answer.strip().lower() in {"y", "yes"}


def _transport(args: argparse.Namespace, root: Path | None, doing: str) -> Any:
    """The helper to use: in-process with --root; else the installed one through pkexec, set
    up first (same password) when it is missing or another version's and the user agrees."""
    from mtpstudio.core.desktop.helper_setup import HelperStatus
    from mtpstudio.core.desktop.install import HelperNotSetUp
    from mtpstudio.core.usecases.system_install import helper_for, helper_state, setup_note

    if root is not None:
        return helper_for(root)
    state = helper_state()
    problem = state.pkexec_problem()
    if problem is not None:
        raise problem
    if not state.needs_setup:
        return helper_for(None)
    print(f"Note: {state.describe()}.")
    if getattr(args, "set_up_helper", False) or _ask(
        f"Set it up now and {doing}? {setup_note(state)} [y/N] "
    ):
        return helper_for(None, setup=True)
    if state.status is HelperStatus.OUTDATED:
        print("Using the installed helper as it is (`mtpstudio setup-helper` updates it).")
        return helper_for(None)
    raise HelperNotSetUp(
        f"nothing was changed: {doing} needs mtpstudio's helper, which is not set up",
        hint="Run it again in a terminal and answer y, or add --set-up-helper (one "
        "administrator password sets the helper up and does this).",
    )


def _said_setup(transport: Any) -> None:
    from mtpstudio.core.desktop.helper_setup import SetupFirstTransport
    from mtpstudio.core.usecases.system_install import describe_written

    if isinstance(transport, SetupFirstTransport) and transport.written:
        print(f"Set up the helper: {describe_written(transport.written)}")


def cmd_setup_helper(args: argparse.Namespace) -> int:
    from mtpstudio.core.desktop.helper_setup import PkexecSetup
    from mtpstudio.core.usecases.system_install import describe_written, helper_state, set_up_helper

    state = helper_state()
    problem = state.pkexec_problem()
    if problem is not None:
        raise problem
    if state.packaged:
        print(f"The helper at {state.helper} comes from a package: update that package instead.")
        return 0
    result = set_up_helper([], PkexecSetup())
    print(f"Set up the helper: {describe_written(result.written)}")
    return 0


# --------------------------------------------------------------------------------------------
# output


def _print_preview(plan: Any, root: Path | None, dry_run: bool) -> None:
    from mtpstudio.core.usecases.system_install import preview

    for note in plan.notes:
        print(note)
    print("Files:")
    for item in preview(plan.files, root):
        print(f"  {item.path} ({item.state}) - {item.explanation}")
    if dry_run:
        for item in preview(plan.files, root):
            if item.diff:
                print()
                sys.stdout.write(item.diff if item.diff.endswith("\n") else item.diff + "\n")


def _print_changes(changes: Sequence[tuple[str, str]]) -> None:
    for path, action in changes:
        print(f"  {action}: {path}")


# --------------------------------------------------------------------------------------------
# apply


def cmd_apply_session(args: argparse.Namespace) -> int:
    from mtpstudio.core.desktop.session_files import SessionVariant
    from mtpstudio.core.units import MIB
    from mtpstudio.core.usecases.desktop import default_session, desktop_facts, prepare_session
    from mtpstudio.core.usecases.system_install import apply_plan

    root = _root(args)
    report = _detect()
    facts = desktop_facts(root)
    if args.variant is None:
        variant, why = default_session(report, facts)
    else:
        variant = {
            "llvmpipe": SessionVariant.WAYLAND_LLVMPIPE,
            "igpu": SessionVariant.WAYLAND_IGPU,
            "x11": SessionVariant.X11_LLVMPIPE,
        }[args.variant]
        why = "chosen with --variant"
    plan, vram = prepare_session(report, variant, facts.sddm, root)
    transport = None if args.dry_run else _transport(args, root, "install the session")
    print(f"Session: {variant.value} - {why}")
    _print_preview(plan, root, args.dry_run)
    print(
        f"Desktop VRAM now: {vram['desktop_bytes'] / MIB:.0f} MiB in "
        f"{len(vram['desktop_processes'])} desktop processes"
        + ("" if report.gpus else " (no GPU detected)")
        + ("; kept as the 'before' figure" if not args.dry_run else "")
    )
    if args.dry_run:
        print("Dry run: nothing was written. Run without --dry-run to install (asks for an "
              "administrator's password through polkit).")  # fmt: skip
    else:
        assert transport is not None
        answer = apply_plan(plan, transport)
        _said_setup(transport)
        print("Installed:")
        _print_changes(answer.changes)
    menu = "(Breeze: 'Desktop Session', bottom left) " if facts.sddm.installed else ""
    heading = "\nAfter installing:\n" if args.dry_run else "\nNext:\n"
    print(
        heading + f"  1. Log out. At the login screen open the session menu {menu}and pick "
        f"'{plan.shown_name}'.\n"
        "  2. The login screen remembers the last session you logged in with: it stays selected "
        "for later logins.\n"
        f"  3. To switch back, pick '{plan.switch_back}' in the same menu. To remove the session: "
        "`mtpstudio revert session`.\n"
        "  Inside the new session, `mtpstudio verify-session` checks the renderer and compares "
        "the desktop's VRAM with the figure kept now."
    )
    return 0


def _service_files(args: argparse.Namespace, scope_name: str) -> tuple[Any, list[str]]:
    from mtpstudio.core.plan.io import load_plan
    from mtpstudio.core.service.render import UnitScope
    from mtpstudio.core.usecases.service import install_files
    from mtpstudio.core.usecases.workbench import resolved_for

    plan = load_plan(args.plan)
    resolved = resolved_for(plan, _detect(include_engines=plan.engine.binary is None))
    out = install_files(resolved, UnitScope(scope_name), args.account)
    return out.files, list(out.messages)


def cmd_apply_unit(args: argparse.Namespace) -> int:
    from mtpstudio.core.runner import SubprocessRunner
    from mtpstudio.core.usecases.system_install import (
        apply_plan,
        install_user_unit,
        preview,
        system_unit_plan,
    )

    root = _root(args)
    if args.scope == "user" and root is not None:
        raise MtpStudioError(
            "--root applies to system files", hint="Drop --root for a user unit, or use --system."
        )
    files, notes = _service_files(args, args.scope)
    for note in notes:
        print(f"note: {note}")
    if args.scope == "user":
        chosen = [files["env"], files["unit"]]
        print("Files:")
        for item in preview(chosen):
            print(f"  {item.path} ({item.state}) - {item.explanation}")
            if args.dry_run and item.diff:
                sys.stdout.write(item.diff)
        if args.dry_run:
            print("Dry run: nothing was written.")
            return 0
        _refuse_silent_replace(preview(chosen), args.replace, "--user")
        result = install_user_unit(files, SubprocessRunner())
        print("Installed:")
        _print_changes(result.changes)
        print(result.reload)
        print(f"Start it with: systemctl --user enable --now {files['unit'].name}")
        return 0
    plan = system_unit_plan(files, root)
    _print_preview(plan, root, args.dry_run)
    if args.dry_run:
        print("Dry run: nothing was written.")
        return 0
    _refuse_silent_replace(preview(plan.files, root), args.replace, "--system")
    transport = _transport(args, root, "install the unit")
    answer = apply_plan(plan, transport)
    _said_setup(transport)
    print("Installed:")
    _print_changes(answer.changes)
    if "daemon_reload" in answer.extra:
        print(f"systemctl daemon-reload: {answer.extra['daemon_reload']}")
    print(f"Start it with: sudo systemctl enable --now {files['unit'].name}")
    return 0


def _refuse_silent_replace(previews: Sequence[Any], replace: bool, scope_flag: str) -> None:
    """An installed file that differs is replaced only with ``--replace``: show the diff first."""
    changed = [p for p in previews if p.state == "changed"]
    if not changed:
        return
    for item in changed:
        print()
        sys.stdout.write(item.diff if item.diff.endswith("\n") else item.diff + "\n")
    if replace:
        print("Replacing the installed version (`mtpstudio revert unit` puts it back).")
        return
    names = " and ".join(str(p.path) for p in changed)
    raise MtpStudioError(
        f"a different version of {names} is installed (the diff is above), so nothing was written",
        hint=f"Run `mtpstudio apply unit --plan PLAN {scope_flag} --replace` to replace it "
        "(`mtpstudio revert unit` puts the old one back).",
    )


def cmd_apply_nvidia(args: argparse.Namespace) -> int:
    from mtpstudio.core.usecases.desktop import render_nvidia_profile
    from mtpstudio.core.usecases.system_install import apply_plan, nvidia_profile_plan

    root = _root(args)
    plan = nvidia_profile_plan(render_nvidia_profile())
    _print_preview(plan, root, args.dry_run)
    if args.dry_run:
        print("Dry run: nothing was written.")
        return 0
    transport = _transport(args, root, "install the profile")
    answer = apply_plan(plan, transport)
    _said_setup(transport)
    print("Installed:")
    _print_changes(answer.changes)
    print("Log out and back in (or restart Plasma) so the compositor picks the profile up.")
    return 0


# --------------------------------------------------------------------------------------------
# revert / status / verify


def cmd_revert(args: argparse.Namespace) -> int:
    from mtpstudio.core.runner import SubprocessRunner
    from mtpstudio.core.usecases.system_install import (
        revert_groups,
        revert_user_group,
        system_status,
        user_status,
    )

    root = _root(args)
    if args.what is None:
        return _revert_usage(root)
    wanted = None if args.what == "all" else args.what
    groups = [g for g in system_status(root)["groups"] if wanted in (None, g.partition(":")[0])]
    user_groups: list[str] = []
    if root is None and wanted in (None, "unit"):
        user_groups = list(user_status()["groups"])
    if not groups and not user_groups:
        print(f"mtpstudio has installed no {'files' if wanted is None else wanted} here.")
        return 0
    if groups:
        transport = _transport(args, root, f"revert {', '.join(groups)}")
        answers = revert_groups(groups, transport)
        _said_setup(transport)
        for group, answer in zip(groups, answers, strict=True):
            print(f"Reverted {group}:")
            _print_changes(answer.changes)
    for group in user_groups:
        result = revert_user_group(group, SubprocessRunner())
        print(f"Reverted user {group}:")
        _print_changes(result.changes)
        print(result.reload)
    if wanted in (None, "session") and any(g.startswith("session:") for g in groups):
        print("The login screen now offers your usual sessions; pick one if it still shows the "
              "removed one as last used.")  # fmt: skip
    return 0


def _revert_usage(root: Path | None) -> int:
    """Bare ``revert``: what is installed and the command that undoes each kind."""
    from mtpstudio.core.usecases.system_install import system_status, user_status

    groups = list(system_status(root)["groups"])
    if root is None:
        groups += [f"{g} (yours)" for g in user_status()["groups"]]
    if not groups:
        print("mtpstudio has installed nothing here, so there is nothing to revert.")
        return 0
    print("Installed by mtpstudio: " + ", ".join(groups))
    kinds = sorted({g.partition(":")[0] for g in groups})
    print("Undo one kind with " + ", ".join(f"`mtpstudio revert {k}`" for k in kinds) +
          ", or everything with `mtpstudio revert all`.")  # fmt: skip
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from mtpstudio.core.usecases.system_install import (
        as_json,
        helper_state,
        system_status,
        user_status,
    )
    from mtpstudio.core.usecases.words import state_dir

    root = _root(args)
    data: dict[str, Any] = {"system": system_status(root)}
    if root is None:
        data["user"] = user_status()
        data["helper"] = as_json(helper_state())
    data["unit_checks"] = _unit_checks(data, root)
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
        return 0
    state = root / "var/lib/mtpstudio" if root is not None else Path("/var/lib/mtpstudio")
    titles = {
        "system": f"System files (through the helper; record in {state})",
        "user": f"Your account's files (record in {state_dir()})",
    }
    if root is None:
        print(f"Helper: {helper_state().describe()}.")
    for where in ("system", "user"):
        if where not in data:
            continue
        status = data[where]
        groups = sorted(status["groups"].items())
        print(f"{titles[where]}: nothing installed" if not groups else f"{titles[where]}:")
        for group, info in groups:
            print(f"  {group} (installed {info['installed_at']}):")
            for f in info["files"]:
                replaced = ", replaced a file (kept for revert)" if f["replaced_a_file"] else ""
                print(f"    {f['path']}  sha256 {f['sha256'][:16]}  {f['state']}{replaced}")
    for lines in data["unit_checks"].values():
        for line in lines:
            print(line)
    return 0


def _unit_checks(data: dict[str, Any], root: Path | None) -> dict[str, list[str]]:
    """Each installed unit's engine against the build it was made for (its check's stamp),
    and what the comparison after its last start found (on this computer, not under --root)."""
    from mtpstudio.core.usecases.prestart import installed_unit_check, unit_load_lines

    out: dict[str, list[str]] = {}
    for where in ("system", "user"):
        for info in (data.get(where) or {}).get("groups", {}).values():
            for f in info["files"]:
                path = Path(f["path"])
                if path.suffix == ".service":
                    on_disk = root / path.relative_to("/") if root is not None else path
                    lines = installed_unit_check(on_disk)
                    if root is None and lines:
                        lines += unit_load_lines(path.name, user=where == "user")
                    if lines:
                        out[f["path"]] = lines
    return out


def cmd_verify_session(args: argparse.Namespace) -> int:
    from mtpstudio.core.runner import SubprocessRunner
    from mtpstudio.core.usecases.desktop import check_session, stored_measurement

    root = _root(args)
    session = os.environ.get("DESKTOP_SESSION") or None
    before = stored_measurement(session, root)
    report = check_session(_detect(), SubprocessRunner(), os.environ, before)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        for line in report.lines():
            print(line)
    return report.exit_code
