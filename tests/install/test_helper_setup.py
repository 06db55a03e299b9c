"""Setting the helper up from a venv install: the root-side program against a temporary root
(the same code pkexec runs), the request it accepts, the package that provides pkexec, and the
CLI's prompt. The real pkexec/polkit path runs in tests/journey (a booted Debian 12)."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.helper_bench import make_root, snapshot

from mtpstudio.cli.main import main
from mtpstudio.core.desktop import helper_setup, install
from mtpstudio.core.desktop.helper_setup import (
    HelperCall,
    HelperStatus,
    InProcessSetup,
    helper_files,
    helper_state,
    set_up_helper,
)
from mtpstudio.core.desktop.session_files import render_nvidia_profile
from mtpstudio.core.distro import polkit_package
from mtpstudio.helper import self_install

REPO = Path(__file__).resolve().parents[2]
HELPER = "usr/lib/mtpstudio/mtpstudio-helper"
POLICY = "usr/share/polkit-1/actions/io.github.mtpstudio.helper.policy"
PROFILE = render_nvidia_profile()
_PROFILE_PLAN = install.nvidia_profile_plan(PROFILE)  # what `apply nvidia-profile` sends
PROFILE_CALL = HelperCall((_PROFILE_PLAN.verb, _PROFILE_PLAN.name), _PROFILE_PLAN.payload)


def run_setup(root: Path, request: bytes, euid: int = 0) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = self_install.run(["--root", str(root)], io.BytesIO(request), out, err, {},
                            sys.executable, euid)  # fmt: skip
    return code, out.getvalue(), err.getvalue()


def request(modules: dict[str, bytes] | None = None, runs: list[object] | None = None) -> bytes:
    mods = helper_files() if modules is None else modules
    data = {"modules": {k: base64.b64encode(v).decode() for k, v in mods.items()},
            "runs": runs or []}  # fmt: skip
    return json.dumps(data).encode()


def test_one_run_sets_the_helper_up_and_makes_the_call(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root")
    assert helper_state(root, which=lambda _: "pkexec").status is HelperStatus.MISSING
    result = set_up_helper([PROFILE_CALL], InProcessSetup(root))
    assert result.written[1:] == (
        "/usr/lib/mtpstudio/mtpstudio-helper",
        "/usr/share/polkit-1/actions/io.github.mtpstudio.helper.policy",
    )
    (code, out, err), = result.results  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["group"] == f"nvidia-profile:{PROFILE.name}"
    assert (root / "etc/nvidia/nvidia-application-profiles-rc.d" / PROFILE.name).is_file()
    # the launcher and the policy, as the policy names them
    launcher = (root / HELPER).read_text()
    digest = self_install.modules_digest(helper_files())
    assert launcher.startswith(f"#!{sys.executable} -I\n# mtpstudio-helper-setup sha256={digest}")
    assert (root / HELPER).stat().st_mode & 0o777 == 0o755
    assert (root / POLICY).read_bytes() == (
        REPO / "packaging" / POLICY.rsplit("/")[-1]
    ).read_bytes()
    lib = root / "usr/lib/mtpstudio" / f"python-{digest[:12]}"
    copied = sorted(
        p.relative_to(lib).as_posix() for p in lib.rglob("*") if p.suffix in (".py", ".j2")
    )
    assert copied == sorted(helper_files())
    # the copy renders from its own templates and libraries (the launcher's -I, its folder)
    assert "mtpstudio/templates/units/system.service.j2" in copied
    assert "jinja2/sandbox.py" in copied and "markupsafe/__init__.py" in copied
    assert all(p.stat().st_mode & 0o022 == 0 for p in lib.rglob("*"))  # nobody else writes
    assert helper_state(root, which=lambda _: "pkexec").status is HelperStatus.READY


def test_the_copied_helper_runs_without_the_venv(tmp_path: Path) -> None:
    """The launcher imports the root-owned copy only: from an empty folder, with no
    PYTHONPATH, the helper answers and its modules come from /usr/lib/mtpstudio."""
    root = make_root(tmp_path / "root")
    set_up_helper([], InProcessSetup(root))
    probe = (
        "import runpy, sys; sys.argv = [sys.argv[1], '--root', sys.argv[2], 'status'];"
        "import io, contextlib\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    try: runpy.run_path(sys.argv[0], run_name='__main__')\n"
        "    except SystemExit: pass\n"
        "print(sys.modules['mtpstudio.helper.main'].__file__)\n"
    )
    env = {"PATH": os.environ["PATH"]}
    ran = subprocess.run([sys.executable, "-I", str(root / HELPER), "--root", str(root), "status"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
                         check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["groups"] == {}
    where = subprocess.run([sys.executable, "-I", "-c", probe, str(root / HELPER), str(root)],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
                           check=False)  # fmt: skip
    assert where.stdout.strip().startswith(str(root / "usr/lib/mtpstudio/python-")), where


def test_another_version_is_replaced_and_its_copy_removed(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root")
    older = dict(helper_files())
    older["mtpstudio/helper/main.py"] += b"\n# an older release\n"
    code, _, err = run_setup(root, request(older))
    assert code == 0, err
    state = helper_state(root, which=lambda _: "pkexec")
    assert state.status is HelperStatus.OUTDATED and state.needs_setup
    old_copies = sorted(p.name for p in (root / "usr/lib/mtpstudio").glob("python-*"))
    set_up_helper([], InProcessSetup(root))
    assert helper_state(root, which=lambda _: "pkexec").status is HelperStatus.READY
    now = sorted(p.name for p in (root / "usr/lib/mtpstudio").glob("python-*"))
    assert len(now) == 1 and now != old_copies


def test_a_packaged_helper_is_never_replaced(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root")
    launcher = root / HELPER
    launcher.parent.mkdir(parents=True)
    packaged = (REPO / "packaging" / "mtpstudio-helper").read_text()
    launcher.write_text(packaged)
    state = helper_state(root, which=lambda _: "pkexec")
    assert state.status is HelperStatus.READY and state.packaged
    code, _, err = run_setup(root, request())
    assert code == 2 and "installed by a package" in err
    assert launcher.read_text() == packaged


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"../evil.py": b"x = 1\n"}, "is not a module or template path"),
        ({"mtpstudio/helper/run.sh": b"#!/bin/sh\n"}, "is not a module or template path"),
        ({"mtpstudio/helper/main.py": b"def (:\n"}, "is not Python source"),
        ({"mtpstudio/other/x.py": b"x = 1\n"}, "lacks mtpstudio/other/__init__.py"),
        ({"mtpstudio/helper/big.py": b"#" * (513 * 1024)}, "larger than 512 KiB"),
        ({"requests/__init__.py": b"x = 1\n"}, "is not a module or template path"),
        ({"mtpstudio/templates/export/x.j2": b"x\n"}, "is not a module or template path"),
        ({"mtpstudio/templates/units/../x.j2": b"x\n"}, "is not a module or template path"),
        ({"mtpstudio/templates/units/a.service.j2": b"\xff\n"}, "is not UTF-8 text"),
    ],
    ids=[
        "dot-dot",
        "not-python-name",
        "not-python",
        "no-package",
        "too-big",
        "other-library",
        "other-template-folder",
        "template-dot-dot",
        "template-not-text",
    ],
)
def test_a_bad_module_is_refused_and_nothing_written(
    tmp_path: Path, change: dict[str, bytes], said: str
) -> None:
    root = make_root(tmp_path / "root")
    before = snapshot(root)
    code, out, err = run_setup(root, request({**helper_files(), **change}))
    assert code == 2 and said in err and out == ""
    assert snapshot(root) == before


@pytest.mark.parametrize("missing", ["jinja2/__init__.py", "markupsafe/__init__.py",
                                     "mtpstudio/templates/__init__.py"])  # fmt: skip
def test_a_request_without_what_the_helper_renders_with_is_refused(
    tmp_path: Path, missing: str
) -> None:
    root = make_root(tmp_path / "root")
    before = snapshot(root)
    files = {k: v for k, v in helper_files().items() if k != missing}
    code, out, err = run_setup(root, request(files))
    assert code == 2 and f"lacks {missing}" in err and out == ""
    assert snapshot(root) == before


@pytest.mark.parametrize(
    ("runs", "said"),
    [
        ([{"args": ["--root", "/", "status"], "stdin": ""}], "may not name --root"),
        ([{"args": [], "stdin": ""}], "short list of words"),
        ([{"args": ["status"], "stdin": "not base64!"}], "is not base64"),
        ([{"args": ["status"], "stdin": "", "env": {"LD_PRELOAD": "x"}}], "object with 'args'"),
    ],
    ids=["root", "empty", "stdin", "extra-key"],
)
def test_a_bad_call_is_refused_before_anything_is_written(
    tmp_path: Path, runs: list[object], said: str
) -> None:
    root = make_root(tmp_path / "root")
    before = snapshot(root)
    code, _, err = run_setup(root, request(runs=runs))
    assert code == 2 and said in err
    assert snapshot(root) == before


def test_on_the_real_root_it_needs_root_and_pkexec_may_not_name_another(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = self_install.run([], io.BytesIO(request()), out, err, {}, sys.executable, 1000)
    assert code == 2 and "runs as root (through pkexec)" in err.getvalue()
    err = io.StringIO()
    code = self_install.run(["--root", str(tmp_path)], io.BytesIO(request()), out, err,
                            {"PKEXEC_UID": "1000"}, sys.executable, 0)  # fmt: skip
    assert code == 2 and "--root is not accepted when run through pkexec" in err.getvalue()


@pytest.mark.parametrize(
    ("os_release", "package", "command"),
    [
        ('ID=debian\nVERSION_ID="12"\n', "pkexec", "sudo apt install pkexec"),
        ('ID=debian\nVERSION_ID="11"\n', "policykit-1", "sudo apt install policykit-1"),
        ("ID=debian\n", "pkexec", "sudo apt install pkexec"),  # testing/sid
        ('ID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\n', "policykit-1",
         "sudo apt install policykit-1"),
        ('ID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n', "pkexec", "sudo apt install pkexec"),
        ('ID=linuxmint\nID_LIKE="ubuntu debian"\nVERSION_ID="21.3"\nUBUNTU_VERSION_ID="22.04"\n',
         "policykit-1", "sudo apt install policykit-1"),
        ("ID=arch\n", "polkit", "sudo pacman -S polkit"),
        ("ID=cachyos\nID_LIKE=arch\n", "polkit", "sudo pacman -S polkit"),
        ('ID=fedora\nVERSION_ID=40\n', "polkit", "sudo dnf install polkit"),
        ('ID="opensuse-tumbleweed"\nID_LIKE="opensuse suse"\n', "polkit",
         "sudo zypper install polkit"),
    ],
)  # fmt: skip
def test_the_package_that_provides_pkexec(os_release: str, package: str, command: str) -> None:
    assert polkit_package(os_release) == (package, command)


# -- the command line ---------------------------------------------------------------------------


@pytest.fixture
def no_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This machine as a fresh venv install sees it: no helper at the policy's path."""
    missing = tmp_path / "nowhere" / "mtpstudio-helper"
    monkeypatch.setattr(helper_setup, "HELPER_INSTALL_PATH", str(missing))
    return missing


def test_without_pkexec_apply_names_the_package_and_keeps_nothing(
    no_helper: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(helper_setup.shutil, "which", lambda *_, **__: None)
    monkeypatch.setattr(helper_setup, "PKEXEC_PATHS", ())
    code = main(["apply", "session", "--variant", "llvmpipe"])
    out, err = capsys.readouterr()
    package, command = polkit_package(helper_setup.read_os_release())
    assert code == 2
    assert f"Install the package {package} ({command})" in err
    assert "kept as the 'before' figure" not in out  # nothing was kept: it stopped first
    assert "--root" not in err


def test_without_a_terminal_the_setup_is_not_assumed(
    no_helper: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(helper_setup, "PKEXEC_PATHS", ("/bin/sh",))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code = main(["apply", "nvidia-profile"])
    out, err = capsys.readouterr()
    assert code == 2
    assert "the helper is not set up yet" in out
    assert "nothing was changed: install the profile needs mtpstudio's helper" in err
    assert "--set-up-helper" in err


@pytest.mark.parametrize("how", ["flag", "prompt"])
def test_the_setup_and_the_install_are_one_run(
    how: str, no_helper: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Answering yes (or --set-up-helper) sets the helper up and installs in the one privileged
    run; pkexec and / stand in as the setup's in-process form against a temporary root."""
    root = make_root(tmp_path / "root")
    runs: list[bytes] = []
    in_root = InProcessSetup(root)

    def one_run(data: bytes) -> tuple[int, str, str]:
        runs.append(data)
        return in_root(data)

    monkeypatch.setattr(helper_setup, "PKEXEC_PATHS", ("/bin/sh",))
    monkeypatch.setattr(install, "PkexecSetup", lambda: one_run)
    monkeypatch.setattr(install, "PkexecHelper", lambda: install.InProcessHelper(root))
    args = ["apply", "nvidia-profile"]
    if how == "flag":
        args.append("--set-up-helper")
    else:
        monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
        monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert len(runs) == 1
    assert "Set up the helper: /usr/lib/mtpstudio/mtpstudio-helper, " in out
    assert (root / "etc/nvidia/nvidia-application-profiles-rc.d" / PROFILE.name).is_file()
    assert (root / HELPER).is_file() and (root / POLICY).is_file()


def test_bare_revert_says_what_is_installed_and_how(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["revert"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "required" not in err
    assert "nothing to revert" in out or "mtpstudio revert all" in out
