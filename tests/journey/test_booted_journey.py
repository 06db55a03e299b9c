"""The two actions users came for, end to end on a booted system (issue 34).

A Debian 12 tree (``scripts/build_journey_tree.py``: systemd, polkit and pkexec, SDDM 0.19 and
Plasma 5.27 from Debian, the account ``ada`` with a password, in the ``sudo`` group) boots with
``systemd-nspawn --boot`` (systemd is PID 1), its root a throwaway overlay, the user's home a
folder of this test. Inside, ``in_tree/driver.py`` does as a new user does:

1. the README's Quick start install line, as ``ada``, in a copy of this checkout;
2. the window (``in_tree/gui_steps.py``, the wizard offscreen, the real system access):
   Apply llvmpipe session → the preview offers to set the helper up → confirmed → polkit asks
   (``pkttyagent``, answered with ada's password) → the session file where SDDM 0.19 reads
   it; Revert → the tree as before (but for the helper); Export service file → the exported
   set installed with the commands the window printed → ``systemctl start`` → ``/health``
   200 on a tiny model → stop;
3. the same on a fresh boot through the command line in a terminal: ``apply session`` asks
   whether to set the helper up (``y``), polkit asks the agent for the password; ``revert
   session``; ``plan`` + ``export-unit --out`` → the printed commands → start → ``/health``
   → stop.

Needs root (systemd-nspawn); ``scripts/test`` installs debootstrap and systemd-container and
builds the tree (cached like the engine builds). The engine is the test bench's upstream build,
bound where a user's own build would be (``~/llama.cpp/build/bin``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.nvml_standin import build_standin
from support.tiny_models import make_model
from support.waiting import patience

REPO = Path(__file__).resolve().parents[2]
IN_TREE = Path(__file__).resolve().parent / "in_tree"
UID = GID = 1000  # ada in the tree (useradd's first account)
ACCOUNT = "ada"
UNIT = """[Unit]
Description=mtpstudio journey (tests/journey/in_tree/driver.py)
After=multi-user.target dbus.service

[Service]
Type=oneshot
ExecStart=/usr/bin/python3 /journey-code/driver.py
TimeoutStartSec=infinity
"""
# systemd in the container on the unified hierarchy with bpf(): the exported unit's device
# policy and IP address lists are enforced as on a desktop (scripts/check_hardened_unit.py)
NSPAWN_ENV = {"SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}
NSPAWN_EXTRA = ("--system-call-filter=bpf", "--capability=CAP_BPF")
SESSIONS_019 = "/usr/share/wayland-sessions"
HELPER_PARTS = ("/usr/lib/mtpstudio", "/usr/share/polkit-1/actions/io.github.mtpstudio",
                "/var/lib/mtpstudio")  # fmt: skip

pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0, reason="boots a Debian tree with systemd-nspawn, which needs root"
    ),
    pytest.mark.timeout(3600),  # a boot's own limits (below) say which phase ran long
    pytest.mark.slow,
]


def repo_files() -> list[str]:
    """This checkout as a fresh clone has it (tracked and new files, nothing ignored)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                            capture_output=True, check=True).stdout  # fmt: skip
    return [p for p in listed.decode().split("\0") if p and (REPO / p).is_file()]


class Machine:
    """The cached tree, booted once per phase with this test's home folder."""

    def __init__(self, work: Path, engine_dir: Path) -> None:
        paths = subprocess.run([sys.executable, str(REPO / "scripts/build_journey_tree.py")],
                               capture_output=True, text=True, check=False)  # fmt: skip
        assert paths.returncode == 0, paths.stdout + paths.stderr
        where = json.loads(subprocess.run(
            [sys.executable, str(REPO / "scripts/build_journey_tree.py"), "--print-paths"],
            capture_output=True, text=True, check=True).stdout)  # fmt: skip
        assert where["ready"], where
        self.tree, self.wheels = Path(where["tree"]), Path(where["wheels"])
        self.work, self.engine_dir = work, engine_dir
        self.home = work / "home"
        self.out = work / "out"
        self.out.mkdir(parents=True)
        self.unit = work / "journey.service"
        self.unit.write_text(UNIT)
        self._make_home()

    def _make_home(self) -> None:
        home = self.home
        for rel in repo_files():
            target = home / "mtpstudio" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, target)
        make_model("hybrid-mtp", home / "models" / "tiny-mtp.gguf", dtype="q8_0")
        (home / "llama.cpp" / "build" / "bin").mkdir(parents=True)  # the engine's bind target
        for dirpath, dirnames, filenames in os.walk(home):
            for name in (*dirnames, *filenames):
                os.lchown(os.path.join(dirpath, name), UID, GID)
        os.chown(home, UID, GID)
        home.chmod(0o755)

    def boot(
        self, phase: str, timeout: float, *, root: Path | None = None, binds: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """One boot running ``phase``: the tree under a throwaway overlay, or ``root`` (a
        tree whose changes persist from one boot to the next: ``persistent_root``)."""
        (self.out / "phase").write_text(phase)
        where = ["-D", str(root)] if root is not None else ["--volatile=overlay", "-D",
                                                              str(self.tree)]  # fmt: skip
        argv = ["systemd-nspawn", "--quiet", "--boot", "--register=no", "--keep-unit", *where,
                f"--bind={self.home}:/home/{ACCOUNT}",
                f"--bind-ro={self.engine_dir}:/home/{ACCOUNT}/llama.cpp/build/bin",
                f"--bind-ro={self.wheels}:/wheels", f"--bind-ro={IN_TREE}:/journey-code",
                f"--bind={self.out}:/out",
                f"--bind-ro={self.unit}:/etc/systemd/system/journey.service",
                *binds, *NSPAWN_EXTRA, "systemd.wants=journey.service"]  # fmt: skip
        booted = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                timeout=timeout, env={**os.environ, **NSPAWN_ENV},
                                check=False)  # fmt: skip
        result = self.out / f"result-{phase}.json"
        log = (self.out / "log.txt").read_text()[-6000:] if (self.out / "log.txt").exists() else ""
        assert result.is_file(), (
            f"the {phase} boot left no result (nspawn exit {booted.returncode}):\n"
            f"{booted.stderr.decode(errors='replace')[-3000:]}\n{log}"
        )
        data: dict[str, Any] = json.loads(result.read_text())
        assert "error" not in data, f"{data['error']}\n{log}"
        return data

    @contextlib.contextmanager
    def persistent_root(self) -> Iterator[Path]:
        """The tree under an overlay of this test's own: what one boot installs (a unit
        enabled, the helper's files) is there at the next boot, as on a disk."""
        layers = self.work / "persistent"
        upper, scratch, root = layers / "upper", layers / "work", layers / "root"
        for folder in (upper, scratch, root):
            folder.mkdir(parents=True, exist_ok=True)
        options = f"lowerdir={self.tree},upperdir={upper},workdir={scratch}"
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(root)],
                       check=True)  # fmt: skip
        try:
            yield root
        finally:
            subprocess.run(["umount", "--lazy", str(root)], check=False)


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory, engine: Callable[[str], Path]) -> Machine:
    """The tree with the README's install done as ada (one boot)."""
    m = Machine(tmp_path_factory.mktemp("journey"), engine("upstream").parent)
    installed = m.boot("install", 900 * patience())
    assert installed["systemd_pid1"].strip() == "systemd"
    assert installed["exit"] == 0, installed["output"]
    m.installed = installed  # type: ignore[attr-defined]
    return m


def assert_session_where_sddm_019_reads_it(session: dict[str, Any]) -> str:
    new = session["new_sessions"]
    assert len(new) == 1, session
    name = new[0]
    info = session[name]
    assert session["local_dir_files"] == []  # not /usr/local/share: 0.19 does not read it
    assert info["exec"].startswith("/usr/local/lib/mtpstudio/"), info
    assert info["wrapper_exists"] and info["wrapper_root_owned_0755"], info
    assert "LIBGL_ALWAYS_SOFTWARE=1" in info["wrapper_runs"]
    assert "/usr/bin/startplasma-wayland" in info["wrapper_runs"]  # what Debian's session runs
    return name


def assert_helper_set_up(files: dict[str, Any]) -> None:
    assert files["launcher"] and files["policy"], files
    assert files["launcher_owner_mode"] == [0, "755"]
    assert files["launcher_head"][0] == "#!/usr/bin/python3 -I"
    assert files["code_owners"] == [0] and not files["code_writable_by_others"]
    assert files["policy_exec_path"] == ["/usr/lib/mtpstudio/mtpstudio-helper"]


def assert_only_the_helper_stays(changes: list[str]) -> None:
    others = [c for c in changes if not c.startswith(HELPER_PARTS)]
    assert others in ([], ["/usr/lib"]) or set(others) <= {"/usr/share/polkit-1/actions"}, others


def assert_service_ran(service: dict[str, Any]) -> None:
    assert service["install"]["exit"] == 0, service["install"]
    assert service["installed_unit"] and service["installed_env"]
    assert "is not executable" not in service["verify"]["stderr"], service["verify"]
    assert service["start_exit"] == 0, service["journal"]
    assert service["health"] == 200, service["journal"]
    assert f"User={ACCOUNT}" in service["show"]
    assert '"content"' in service["completion"], service["completion"]
    assert service["stop_exit"] == 0 and service["after_stop"] == "inactive"


def test_the_readme_install_runs_as_the_user(machine: Machine) -> None:
    installed = machine.installed  # type: ignore[attr-defined]
    assert installed["command"].startswith("python3 -m venv .venv && .venv/bin/pip install")
    assert "Verdict:" in installed["output"]  # `.venv/bin/mtpstudio` with no display: the plan


def test_the_window_sets_the_helper_up_applies_reverts_and_exports(machine: Machine) -> None:
    gui = machine.boot("gui", 1200 * patience())
    assert gui["helper_before"] == {"launcher": False, "policy": False}
    apply = gui["apply"]
    assert apply["preview"]["install_button"] == (
        "Set up the helper and install (asks for a password)"
    ), apply
    assert "sets up mtpstudio's helper first" in apply["preview"]["notes"]
    said = apply["outcome"]["sentence"]
    assert apply["outcome"]["tone"] == "GOOD", apply
    assert said.startswith("Set up the helper (/usr/lib/mtpstudio/mtpstudio-helper")
    assert apply["agent"]["passwords"] == 1  # one authentication: setup and install
    assert "org.freedesktop.policykit.exec" in apply["agent"]["transcript"]
    assert_helper_set_up(gui["helper_after"])
    name = assert_session_where_sddm_019_reads_it(gui["session"])
    assert [f"{SESSIONS_019}/{name}", "created"] in apply["installed"]

    revert = gui["revert"]
    assert revert["outcome"]["tone"] == "GOOD", revert
    assert revert["agent"]["passwords"] == 1
    assert "io.github.mtpstudio.helper" in revert["agent"]["transcript"]  # the helper's action
    assert_only_the_helper_stays(gui["tree_changes_after_revert"])

    export = gui["export"]
    assert export["outcome"]["tone"] == "GOOD", export
    assert export["files"] == ["install-mtpstudio-llama.sh", "mtpstudio-llama.env",
                               "mtpstudio-llama.service"]  # fmt: skip
    assert f"ExecStart=/home/{ACCOUNT}/llama.cpp/build/bin/llama-server" in export["unit"]
    assert_service_ran(gui["service"])


def test_the_command_line_does_the_same_in_a_terminal(machine: Machine) -> None:
    cli = machine.boot("cli", 1200 * patience())
    assert cli["helper_before"] == {"launcher": False, "policy": False}  # a fresh boot
    apply = cli["apply"]
    assert apply["exit"] == 0, apply["text"]
    assert apply["answered"] == ["yes to the setup", "password"]
    assert "Set up the helper: /usr/lib/mtpstudio/mtpstudio-helper" in apply["text"]
    assert "kept as the 'before' figure" in apply["text"]
    assert_helper_set_up(cli["helper_after"])
    name = assert_session_where_sddm_019_reads_it(cli["session"])
    assert f"created: {SESSIONS_019}/{name}" in apply["text"]

    revert = cli["revert"]
    assert revert["exit"] == 0, revert["text"]
    assert revert["answered"] == ["password"]
    assert f"removed: {SESSIONS_019}/{name}" in revert["text"]
    assert_only_the_helper_stays(cli["tree_changes_after_revert"])

    assert cli["plan_exit"] == 0
    assert cli["export"]["exit"] == 0, cli["export"]["stderr"]
    assert_service_ran(cli["service"])


STANDIN_NVML = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
RECORDING = REPO / "tests/fixtures/detect/nvml/rtx4070super-kde.json"
SERVICE = "mtpstudio-llama.service"
MARK = f"mtpstudio: {SERVICE}: "  # the check's and the comparison's lines begin so


def check_line(lines: list[str]) -> str:
    found = [line for line in lines if "MiB free" in line or "cannot be read" in line]
    assert len(found) == 1, lines
    return found[0]


def test_the_service_at_boot_keeps_its_placement_and_checks_the_vram(
    machine: Machine, tmp_path: Path
) -> None:
    """Issue 44: the system unit enabled, the machine booted with no session; its check and its
    placement at boot, its load compared in the journal (read by `status` and the Launch page),
    then a login and a program that takes more than the plan leaves.

    No GPU exists here: the engine is the CPU build, and the GPU is a stand-in NVML library
    (``support/nvml_standin.py``) answering with the recorded RTX 4070 SUPER's values, whose
    free memory follows stand-in processes that register the MiB they hold: the desktop's
    compositor (``kwin_wayland``, 1,024 MiB, the plan's desktop share) and a program that
    takes more than the plan leaves. Everything else is real: pynvml and mtpstudio's
    detection read the library, systemd runs the unit's ``ExecStartPre=`` / ``ExecStartPost=``
    as the account, journald keeps the lines."""
    library = build_standin(json.loads(RECORDING.read_text()), tmp_path / "nvml")
    binds = (f"--bind-ro={library}:{STANDIN_NVML}",)
    with machine.persistent_root() as root:
        setup = machine.boot("unit-setup", 1200 * patience(), root=root, binds=binds)
        booted = machine.boot("unit-boot", 1500 * patience(), root=root, binds=binds)

    assert setup["plan"]["exit"] == 0, setup["plan"]["text"]
    assert "CUDA0" in setup["plan"]["text"] and "RTX 4070 SUPER" in setup["plan"]["text"]
    assert setup["apply"]["exit"] == 0, setup["apply"]["text"]
    assert setup["enable_exit"] == 0
    unit = setup["unit"]
    assert "\nExecStartPre=" in unit and "--need CUDA0=" in unit, unit
    assert "\nExecStartPost=-" in unit and "poststart" in unit, unit

    boot = booted["boot"]
    assert booted["health"] == 200, boot
    at_boot = check_line(boot["lines"])
    assert at_boot.startswith(f"{MARK}CUDA0 (NVIDIA GeForce RTX 4070 SUPER) has "), at_boot
    assert "and the desktop's 1,024 MiB still to come at login: enough" in at_boot, at_boot
    argv = boot["argv"]
    assert "--fit" not in argv or argv[argv.index("--fit") + 1] == "off", argv  # placed by plan
    loads = [line for line in boot["lines"] if line.startswith(f"{MARK}load: ")]
    assert [line.split()[3] for line in loads] == ["CUDA0", "CPU"], boot["lines"]
    assert "nothing was placed there" in loads[0]  # the CPU build: said, not hidden
    assert loads[1].endswith(": as planned."), loads
    assert all(line in booted["status"] for line in loads), booted["status"]
    page = booted["launch_page"]
    assert page["unit_load_shown"], page
    assert loads[1].removeprefix(f"{MARK}load: ") in page["unit_load"], page

    login = booted["after_login"]
    assert login["exit"] == 0 and login["health"] == 200, login
    after = check_line(login["lines"])
    assert "still to come" not in after and after.endswith("spare)."), after
    assert login["argv"] == argv  # the same placement after a login

    short = booted["short"]
    assert short["exit"] != 0 and short["is_active"] != "active", short
    refused = check_line(short["lines"])
    assert "300 MiB short; held by blender (pid " in refused, refused
    assert "kwin_wayland (pid " in refused and "not starting" in refused, refused

    # the plan's other choice: start with the engine's fit instead, and say so
    fit = booted["fit_instead"]
    assert fit["plan_exit"] == 0 and fit["apply"]["exit"] == 0, fit["apply"]["text"]
    assert 'Environment="MTPSTUDIO_PLACEMENT=--fit off' in fit["unit"], fit["unit"]
    assert fit["unit"].rstrip().count("$MTPSTUDIO_PLACEMENT") == 1, fit["unit"]
    assert fit["health"] == 200 and fit["state"]["ActiveState"] == "active", fit
    swapped = check_line(fit["lines"])
    assert "MiB short; held by blender (pid " in swapped, swapped
    assert "starting with the engine's fit instead (--fit on --fit-target " in swapped, swapped
    target = fit["argv"][fit["argv"].index("--fit-target") + 1]
    assert fit["argv"][fit["argv"].index("--fit") + 1] == "on", fit["argv"]  # systemd read it
    assert "--n-cpu-moe" not in fit["argv"] and "-ngl" not in fit["argv"], fit["argv"]
    assert f"--fit-target {target}" in fit["placement_env"], fit["placement_env"]
    assert any("runs the engine's fit instead of the planned" in line for line in fit["lines"])
