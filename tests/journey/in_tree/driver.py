"""The journey inside the booted Debian 12 tree (systemd is PID 1), run once per boot as root
by journey.service; the user's steps run as that user (runuser), the machine's as root.

Phases (``/out/phase``):

* ``install``: the README's Quick start install line, as the user, in ``~/mtpstudio``.
* ``gui``: the wizard's actions (``gui_steps.py``): Apply llvmpipe session (the helper set up
  through the window's own offer, a polkit agent answered here), the session file checked
  where SDDM 0.19 reads it, Revert, the tree compared; Export service file, the exported set
  installed with the commands the window printed, ``systemctl start``, ``/health``, stop.
* ``cli``: the same through the command line in a terminal (a pty): the CLI's own question
  answered ``y``, polkit's password question answered by the same agent, registered for the
  command's process (pkexec's built-in terminal agent fails without a login session: "No
  session for cookie", polkit 122).

Everything it saw goes to ``/out/result-PHASE.json`` (and a log); then it powers the machine
off. Standard library only: this runs on the tree's own Python, outside any venv.
"""

from __future__ import annotations

import hashlib
import json
import os
import pty
import re
import select
import signal
import stat
import subprocess
import sys
import termios
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

ACCOUNT = "ada"
PASSWORD = "journey-pass-1"
HOME = Path("/home") / ACCOUNT
REPO = HOME / "mtpstudio"
OUT = Path("/out")
CODE = Path("/journey-code")
VENV_PY = REPO / ".venv" / "bin" / "python"
MTPSTUDIO = REPO / ".venv" / "bin" / "mtpstudio"
SESSIONS_019 = Path("/usr/share/wayland-sessions")  # SDDM 0.19 reads only this folder
SNAPSHOT_ROOTS = ("/etc", "/usr", "/opt", "/var/lib/mtpstudio")
HELPER_PARTS = ("/usr/lib/mtpstudio/", "/usr/share/polkit-1/actions/io.github.mtpstudio",
                "/var/lib/mtpstudio/")  # fmt: skip
SERVICE = "mtpstudio-llama.service"
PORT = 8080
LOG = OUT / "log.txt"


def log(text: str) -> None:
    with LOG.open("a") as f:
        f.write(text.rstrip("\n") + "\n")


def user_env(**extra: str) -> list[str]:
    env = {"HOME": str(HOME), "USER": ACCOUNT, "LOGNAME": ACCOUNT, "LANG": "C.UTF-8",
           "PATH": "/usr/local/bin:/usr/bin:/bin", **extra}  # fmt: skip
    return ["env", "-i", *(f"{k}={v}" for k, v in env.items())]


def as_user(*argv: str, **extra: str) -> list[str]:
    return ["runuser", "-u", ACCOUNT, "--", *user_env(**extra), *argv]


def exec_as_user(*argv: str, **extra: str) -> list[str]:
    """The user's program in this very process (setpriv execs; runuser forks and closes
    descriptors): its PID is the one polkit sees as pkexec's caller."""
    as_ada = ["setpriv", f"--reuid={ACCOUNT}", f"--regid={ACCOUNT}", "--init-groups", "--"]
    return [*as_ada, *user_env(**extra), *argv]


def run(argv: list[str], timeout: float = 600, **kw: Any) -> subprocess.CompletedProcess[str]:
    log(f"$ {' '.join(argv)}")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          cwd=kw.pop("cwd", "/"), **kw)  # fmt: skip
    log(f"  exit {done.returncode}\n{done.stdout}{done.stderr}")
    return done


# --------------------------------------------------------------------------------------------
# the tree as a set of files


def snapshot() -> dict[str, str]:
    """Path -> kind and content hash of what the machine's folders hold."""
    out: dict[str, str] = {}
    for top in SNAPSHOT_ROOTS:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in (*dirnames, *filenames):
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    out[path] = "link:" + os.readlink(path)
                elif stat.S_ISDIR(st.st_mode):
                    out[path] = f"dir:{stat.S_IMODE(st.st_mode):o}"
                elif stat.S_ISREG(st.st_mode):
                    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
                    out[path] = f"file:{stat.S_IMODE(st.st_mode):o}:{st.st_uid}:{digest}"
    return out


def tree_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


# --------------------------------------------------------------------------------------------
# a terminal (pty) the test types into


class Terminal:
    """A program on a pty (as the user): read what it prints, type answers."""

    def __init__(self, argv: list[str]) -> None:
        log(f"$ (terminal) {' '.join(argv)}")
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            try:
                os.execvp(argv[0], argv)
            finally:
                os._exit(127)
        self.text = ""
        self.answered: list[str] = []
        self.code: int | None = None
        self.agent_transcript = ""

    def read(self, timeout: float) -> bool:
        """Read what is there (up to ``timeout``); False once the program has closed it."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 4096)
        except OSError:
            return False
        if not data:
            return False
        self.text += data.decode(errors="replace")
        return True

    def type(self, line: str, what: str) -> None:
        self.answered.append(what)
        os.write(self.fd, (line + "\n").encode())

    def type_secret(self, line: str, what: str, timeout: float = 10) -> None:
        """Type once the program has turned the echo off: a password prompt flushes what was
        typed before it is ready (tcsetattr TCSAFLUSH)."""
        deadline = time.monotonic() + timeout
        while termios.tcgetattr(self.fd)[3] & termios.ECHO and time.monotonic() < deadline:
            time.sleep(0.02)
        self.type(line, what)

    def wait(self) -> int:
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)

    def stop(self) -> None:
        try:
            os.kill(self.pid, signal.SIGTERM)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def in_terminal(argv: list[str], answers: list[tuple[str, str, str]], timeout: float) -> Terminal:
    """Run the user's command on a terminal with the test's polkit agent registered for it:
    answer each prompt of the command once it shows (pattern, line, name), in order, and the
    agent's password questions; returns the finished terminal (``code``: its exit status)."""
    term = Terminal(argv)
    agent = Agent(term.pid)
    deadline, seen = time.monotonic() + timeout, 0
    pending = list(answers)
    alive = True
    try:
        while alive and time.monotonic() < deadline:
            alive = term.read(0.1)
            while pending and re.search(pending[0][0], term.text[seen:]):
                pattern, line, name = pending.pop(0)
                seen += re.search(pattern, term.text[seen:]).end()  # type: ignore[union-attr]
                term.type(line, name)
            agent.answer()
        if alive:
            term.stop()
            raise TimeoutError(f"the terminal did not finish in {timeout:.0f} s:\n{term.text}")
    finally:
        transcript = agent.stop()
    term.code = term.wait()
    term.answered += ["password"] * agent.passwords
    term.agent_transcript = transcript
    log(term.text)
    return term


# --------------------------------------------------------------------------------------------
# the polkit agent for the window


class Agent:
    """pkttyagent registered for one process (the window), as the user, on a pty: it prints
    polkit's question and the test types the password."""

    def __init__(self, pid: int) -> None:
        read_end, write_end = os.pipe()
        os.set_inheritable(write_end, True)
        self.term = Terminal(exec_as_user("pkttyagent", "--process", str(pid),
                                          "--notify-fd", str(write_end)))  # fmt: skip
        os.close(write_end)
        ready, _, _ = select.select([read_end], [], [], 30)
        os.close(read_end)
        if not ready:
            self.term.read(1)
            raise TimeoutError(f"pkttyagent did not register in 30 s: {self.term.text}")
        self.passwords = 0
        self.seen = 0

    def answer(self) -> None:
        """Type the password when polkit's question has shown (once per question)."""
        self.term.read(0.1)
        if "Password:" in self.term.text[self.seen :]:
            self.seen = self.term.text.rindex("Password:") + len("Password:")
            self.term.type_secret(PASSWORD, "password")
            self.passwords += 1

    def serve(self, until: subprocess.Popen[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while until.poll() is None and time.monotonic() < deadline:
            self.answer()
        if until.poll() is None:
            until.kill()
            raise TimeoutError(f"the window did not finish in {timeout:.0f} s")

    def stop(self) -> str:
        self.term.read(0.5)
        self.term.stop()
        log("agent transcript:\n" + self.term.text)
        return self.term.text


def gui_step(step: str, timeout: float = 900) -> dict[str, Any]:
    """One gui_steps.py run as the user, with the agent answering for its process."""
    pid_file, ready = Path(f"/tmp/gui-{step}.pid"), Path(f"/tmp/gui-{step}.agent")
    result_file = Path(f"/tmp/gui-{step}.json")
    for p in (pid_file, ready, result_file):
        p.unlink(missing_ok=True)
    os.chmod("/tmp", 0o1777)
    argv = as_user(str(VENV_PY), str(CODE / "gui_steps.py"), step, str(result_file),
                   JOURNEY_PID_FILE=str(pid_file), JOURNEY_AGENT_READY=str(ready),
                   QT_QPA_PLATFORM="offscreen")  # fmt: skip
    log(f"$ {' '.join(argv)}")
    window = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              cwd=str(HOME))  # fmt: skip
    deadline = time.monotonic() + 120
    while not pid_file.exists() and window.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    agent = Agent(int(pid_file.read_text()))
    ready.write_text("registered\n")
    try:
        agent.serve(window, timeout)
    finally:
        transcript = agent.stop()
    output = window.stdout.read() if window.stdout else ""
    log(output)
    data: dict[str, Any] = json.loads(result_file.read_text()) if result_file.exists() else {}
    data["agent"] = {"passwords": agent.passwords, "transcript": transcript}
    data["output"] = output[-4000:]
    return data


# --------------------------------------------------------------------------------------------
# the machine's side: session files, the exported set, the service


def sessions_now() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(SESSIONS_019.glob("*.desktop"))}


def session_check(before: dict[str, str]) -> dict[str, Any]:
    """The new session file where SDDM 0.19 reads it, and the wrapper it starts."""
    now = sessions_now()
    new = {k: v for k, v in now.items() if k not in before}
    local = "/usr/local/share/wayland-sessions"
    listed = sorted(os.listdir(local)) if os.path.isdir(local) else []
    out: dict[str, Any] = {"new_sessions": sorted(new), "local_dir_files": listed}
    for name, text in new.items():
        exec_line = next((ln.split("=", 1)[1] for ln in text.splitlines()
                          if ln.startswith("Exec=")), "")  # fmt: skip
        wrapper = exec_line.split()[0] if exec_line else ""
        st = os.stat(wrapper) if wrapper and os.path.exists(wrapper) else None
        out[name] = {
            "exec": exec_line,
            "wrapper_exists": st is not None,
            "wrapper_root_owned_0755": st is not None
            and st.st_uid == 0
            and stat.S_IMODE(st.st_mode) == 0o755,
            "wrapper_runs": open(wrapper).read() if st is not None else "",  # noqa: SIM115
            "name": next((ln for ln in text.splitlines() if ln.startswith("Name=")), ""),
        }
    return out


def health(timeout: float = 120) -> tuple[int, float]:
    started = time.monotonic()
    code = 0
    while time.monotonic() - started < timeout:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=5) as r:
                code = r.status
                if code == 200:
                    break
        except OSError as exc:
            code = getattr(exc, "code", 0) or 0
        time.sleep(0.5)
    return code, round(time.monotonic() - started, 1)


def install_and_start(commands: list[str]) -> dict[str, Any]:
    """The admin runs the commands export printed (as root: without sudo), then checks
    /health, the service's account, and stops it."""
    out: dict[str, Any] = {"commands": commands}
    install_cmd, start_cmd = commands[0], commands[1]
    assert install_cmd.startswith("sudo sh ") and start_cmd.startswith("sudo systemctl start")
    ran = run(["sh", "-c", install_cmd.removeprefix("sudo ")])
    out["install"] = {"exit": ran.returncode, "output": ran.stdout + ran.stderr}
    out["installed_unit"] = Path(f"/etc/systemd/system/{SERVICE}").is_file()
    out["installed_env"] = Path("/etc/mtpstudio/mtpstudio-llama.env").is_file()
    verify = run(["systemd-analyze", "verify", f"/etc/systemd/system/{SERVICE}"])
    out["verify"] = {"exit": verify.returncode, "stderr": verify.stderr}
    started = run(["sh", "-c", start_cmd.removeprefix("sudo ")])
    out["start_exit"] = started.returncode
    out["health"], out["health_after_s"] = health()
    show = run(["systemctl", "show", SERVICE, "-p", "ActiveState", "-p", "User", "-p",
                "ExecMainPID", "-p", "NRestarts"])  # fmt: skip
    out["show"] = show.stdout
    completion = b""
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{PORT}/completion",
                                     data=b'{"prompt": "Hello", "n_predict": 4}',
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(req, timeout=60) as r:
            completion = r.read()
    except OSError as exc:
        completion = str(exc).encode()
    out["completion"] = completion.decode(errors="replace")[:300]
    stopped = run(["systemctl", "stop", SERVICE])
    out["stop_exit"] = stopped.returncode
    out["after_stop"] = run(["systemctl", "is-active", SERVICE]).stdout.strip()
    out["journal"] = run(
        ["journalctl", "-u", SERVICE, "--no-pager", "-o", "cat", "-n", "40"]
    ).stdout
    return out


# --------------------------------------------------------------------------------------------
# phases


def readme_command() -> str:
    """The README's Quick start install line, verbatim."""
    text = (REPO / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1]
    block = quick.split("```sh\n", 1)[1].split("```", 1)[0]
    return block.strip().splitlines()[0]


def phase_install() -> dict[str, Any]:
    line = readme_command()
    started = time.monotonic()
    # the machine's Python index is a folder of wheels (no network needed): pip's own settings
    done = run(as_user("bash", "-c", line, PIP_NO_INDEX="1", PIP_FIND_LINKS="/wheels",
                       PIP_DISABLE_PIP_VERSION_CHECK="1"), cwd=str(REPO))  # fmt: skip
    return {"command": line, "exit": done.returncode, "seconds": round(time.monotonic() - started),
            "output": (done.stdout + done.stderr)[-12000:]}  # fmt: skip


def helper_files() -> dict[str, Any]:
    launcher = Path("/usr/lib/mtpstudio/mtpstudio-helper")
    policy = Path("/usr/share/polkit-1/actions/io.github.mtpstudio.helper.policy")
    out: dict[str, Any] = {"launcher": launcher.is_file(), "policy": policy.is_file()}
    if launcher.is_file():
        st = launcher.stat()
        out["launcher_owner_mode"] = [st.st_uid, f"{stat.S_IMODE(st.st_mode):o}"]
        out["launcher_head"] = launcher.read_text().splitlines()[:2]
        lib = [p for p in Path("/usr/lib/mtpstudio").iterdir() if p.name.startswith("python-")]
        out["code_owners"] = sorted({f.stat().st_uid for d in lib for f in d.rglob("*")})
        out["code_writable_by_others"] = any(f.stat().st_mode & 0o022 for d in lib
                                             for f in d.rglob("*"))  # fmt: skip
    if policy.is_file():
        out["policy_exec_path"] = re.findall(r"exec\.path\">([^<]+)<", policy.read_text())
    return out


def phase_gui() -> dict[str, Any]:
    out: dict[str, Any] = {"helper_before": helper_files()}
    before, sessions = snapshot(), sessions_now()
    out["apply"] = gui_step("apply")
    out["helper_after"] = helper_files()
    out["session"] = session_check(sessions)
    out["revert"] = gui_step("revert")
    out["tree_changes_after_revert"] = tree_changes(before, snapshot())
    out["export"] = gui_step("export")
    if out["export"].get("commands"):
        out["service"] = install_and_start(out["export"]["commands"])
    return out


def phase_cli() -> dict[str, Any]:
    out: dict[str, Any] = {"helper_before": helper_files()}
    before, sessions = snapshot(), sessions_now()
    term = in_terminal(exec_as_user(str(MTPSTUDIO), "apply", "session", "--variant", "llvmpipe"),
                       [(r"\[y/N\] ", "y", "yes to the setup")], 600)  # fmt: skip
    out["apply"] = {"exit": term.code, "text": term.text, "answered": term.answered,
                    "agent": term.agent_transcript}  # fmt: skip
    out["helper_after"] = helper_files()
    out["session"] = session_check(sessions)
    term = in_terminal(exec_as_user(str(MTPSTUDIO), "revert", "session"), [], 600)
    out["revert"] = {"exit": term.code, "text": term.text, "answered": term.answered,
                     "agent": term.agent_transcript}  # fmt: skip
    out["tree_changes_after_revert"] = tree_changes(before, snapshot())
    plan = run(as_user(str(MTPSTUDIO), "plan", "--model", str(HOME / "models/tiny-mtp.gguf"),
                       "--save", str(HOME / "plan.json")), cwd=str(HOME))  # fmt: skip
    out["plan_exit"] = plan.returncode
    export = run(as_user(str(MTPSTUDIO), "export-unit", "--plan", str(HOME / "plan.json"),
                         "--out", str(HOME / "export-cli")), cwd=str(HOME))  # fmt: skip
    out["export"] = {"exit": export.returncode, "stdout": export.stdout, "stderr": export.stderr}
    lines = export.stdout.split("Install and start it:\n", 1)[-1].splitlines()
    commands = [ln.strip() for ln in lines if ln.startswith("  ")]
    if export.returncode == 0:
        out["service"] = install_and_start(commands)
    return out


# --------------------------------------------------------------------------------------------
# the service at boot: the stand-in GPU (tests/support/nvml_standin.py) and its stand-in users


STANDIN = Path("/run/nvml-standin")  # where the stand-in NVML reads who holds its memory
STANDIN_BIN = Path("/run/standin-bin")
PLAN = HOME / "plan-boot.json"


def stand_in(name: str, kind: str, mib: int) -> subprocess.Popen[bytes]:
    """A process of the user's named ``name`` (a copy of sleep) that holds ``mib`` MiB of the
    stand-in GPU's memory as a ``graphics`` or ``compute`` user, as NVML would list it."""
    STANDIN_BIN.mkdir(exist_ok=True)
    program = STANDIN_BIN / name
    if not program.exists():
        program.write_bytes(Path("/usr/bin/sleep").read_bytes())
        program.chmod(0o755)
    proc = subprocess.Popen(exec_as_user(str(program), "3600"))
    STANDIN.mkdir(exist_ok=True)
    (STANDIN / str(proc.pid)).write_text(f"{kind} {mib}\n")
    log(f"stand-in {name} (pid {proc.pid}) holds {mib} MiB ({kind})")
    return proc


def invocation_lines(invocation: str) -> list[str]:
    text = run(["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "--no-pager", "-o", "cat"])
    return text.stdout.splitlines()


def unit_state() -> dict[str, str]:
    shown = run(["systemctl", "show", SERVICE, "-p", "ActiveState", "-p", "Result", "-p",
                 "InvocationID", "-p", "MainPID"])  # fmt: skip
    return dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)


def wait_lines(mark: str, timeout: float = 120) -> dict[str, Any]:
    """This start's journal once a line with ``mark`` shows (the check's or the comparison's)."""
    deadline = time.monotonic() + timeout
    while True:
        state = unit_state()
        lines = invocation_lines(state.get("InvocationID", ""))
        if any(mark in line for line in lines) or time.monotonic() > deadline:
            ours = [line for line in lines if line.startswith("mtpstudio: ")]
            return {"state": state, "lines": ours}
        time.sleep(1)


def engine_argv(state: dict[str, str]) -> list[str]:
    pid = state.get("MainPID", "0")
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []


def phase_unit_setup() -> dict[str, Any]:
    """Logged in (the desktop holds its share), the user plans and installs the system unit
    through the helper, and the admin enables it: it starts at the next boot."""
    desktop = stand_in("kwin_wayland", "graphics", 1024)
    out: dict[str, Any] = {}
    plan = run(as_user(str(MTPSTUDIO), "plan", "--model", str(HOME / "models/tiny-mtp.gguf"),
                       "--save", str(PLAN)), cwd=str(HOME))  # fmt: skip
    out["plan"] = {"exit": plan.returncode, "text": plan.stdout + plan.stderr}
    term = in_terminal(exec_as_user(str(MTPSTUDIO), "apply", "unit", "--plan", str(PLAN)),
                       [(r"\[y/N\] ", "y", "yes to the setup")], 600)  # fmt: skip
    out["apply"] = {"exit": term.code, "text": term.text, "answered": term.answered}
    unit = Path(f"/etc/systemd/system/{SERVICE}")
    out["unit"] = unit.read_text() if unit.is_file() else ""
    out["enable_exit"] = run(["systemctl", "enable", SERVICE]).returncode
    desktop.kill()
    desktop.wait()
    return out


def restart() -> dict[str, Any]:
    done = run(["systemctl", "restart", SERVICE], timeout=300)
    return {"exit": done.returncode, **wait_lines(" free")}


def fit_instead() -> dict[str, Any]:
    """With the memory still short, the user plans again with the engine's fit instead
    (``--short-vram fit``) and installs the unit again through the helper; the restarted unit
    then starts with the engine's fit, and says so."""
    out: dict[str, Any] = {}
    plan = run(as_user(str(MTPSTUDIO), "plan", "--plan", str(PLAN), "--short-vram", "fit",
                       "--save", str(PLAN)), cwd=str(HOME))  # fmt: skip
    out["plan_exit"] = plan.returncode
    term = in_terminal(exec_as_user(str(MTPSTUDIO), "apply", "unit", "--plan", str(PLAN),
                                    "--replace"),
                       [(r"\[y/N\] ", "y", "yes to the setup")], 600)  # fmt: skip
    out["apply"] = {"exit": term.code, "text": term.text}
    unit = Path(f"/etc/systemd/system/{SERVICE}")
    out["unit"] = unit.read_text() if unit.is_file() else ""
    out |= restart()
    out["health"] = health(300)[0]
    out["state"] = unit_state()
    out["argv"] = engine_argv(out["state"])
    out["lines"] = wait_lines(": load:")["lines"]
    folder = Path(f"/run/{SERVICE.removesuffix('.service')}")
    placement = folder / "placement.env"
    out["placement_env"] = placement.read_text() if placement.is_file() else ""
    return out


def phase_unit_boot() -> dict[str, Any]:
    """The unit started at boot, before any session: the check's line, the placement the plan
    wrote, the comparison after the load (journal, `status`, the Launch page); then a login
    (the desktop takes its share) and a program that takes more than the plan leaves."""
    out: dict[str, Any] = {"health": health(300)[0]}
    out["boot"] = wait_lines(": load:")
    out["boot"]["argv"] = engine_argv(out["boot"]["state"])
    out["status"] = run(as_user(str(MTPSTUDIO), "status"), cwd=str(HOME)).stdout
    out["launch_page"] = gui_step("unit-load", 600)
    desktop = stand_in("kwin_wayland", "graphics", 1024)  # the user logs in
    out["after_login"] = restart()
    out["after_login"]["argv"] = engine_argv(out["after_login"]["state"])
    out["after_login"]["health"] = health(300)[0]
    check = next((line for line in out["after_login"]["lines"] if "MiB free" in line), "")
    free_now = re.search(r"has ([\d,]+) MiB free; the engine needs ([\d,]+) MiB", check)
    if free_now is not None:
        free, need = (int(x.replace(",", "")) for x in free_now.groups())
        hog = stand_in("blender", "compute", free - need + 300)  # 300 MiB too much
        out["short"] = restart()
        out["short"]["is_active"] = run(["systemctl", "is-active", SERVICE]).stdout.strip()
        out["fit_instead"] = fit_instead()
        hog.kill()
        hog.wait()
    desktop.kill()
    desktop.wait()
    return out


def main() -> int:
    phase = (OUT / "phase").read_text().strip()
    result: dict[str, Any] = {"phase": phase, "systemd_pid1": Path("/proc/1/comm").read_text()}
    result["system_state"] = run(["systemctl", "is-system-running"], timeout=60).stdout.strip()
    try:
        phases = {"install": phase_install, "gui": phase_gui, "cli": phase_cli,
                  "unit-setup": phase_unit_setup, "unit-boot": phase_unit_boot}  # fmt: skip
        result |= phases[phase]()
    except Exception:
        result["error"] = traceback.format_exc()
    finally:
        (OUT / f"result-{phase}.json").write_text(json.dumps(result, indent=2))
        subprocess.run(["systemctl", "--no-block", "poweroff"], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
