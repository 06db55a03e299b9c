"""The exported README gives a working install command for every file `render` wrote."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from support.argv import launch_spec
from support.rendering import BINARY, users_plan

from mtpstudio.core.desktop.session_files import SessionSettings
from mtpstudio.core.engines.registry import documented_build
from mtpstudio.core.plan.choices import DesktopReclaim, EngineFlavour
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.rendered_file import RenderedFile
from mtpstudio.core.service.export import README_NAME, render_all, write_files
from mtpstudio.core.service.render import UnitScope


def _files(desktop: DesktopReclaim, scope: UnitScope) -> dict[str, RenderedFile]:
    plan = plan_with(users_plan("upstream"), {"desktop": desktop.value})
    spec = launch_spec(plan, documented_build(EngineFlavour.UPSTREAM, Path(BINARY["upstream"])))
    user = "alice" if scope is UnitScope.SYSTEM else None
    session = SessionSettings(igpu_card="/dev/dri/by-path/pci-0000:00:02.0-card")
    return render_all(plan, spec, scope=scope, user=user, session=session)


def _shell_lines(readme: str) -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", readme, flags=re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def _install_line(f: RenderedFile) -> str:
    sudo = "sudo " if f.privileged else ""
    return (
        f"{sudo}install -D -m {f.mode:04o} {shlex.quote(f.name)} {shlex.quote(str(f.install_path))}"
    )


@pytest.mark.parametrize("scope", list(UnitScope))
@pytest.mark.parametrize("desktop", list(DesktopReclaim))
def test_every_written_file_has_its_install_command(
    desktop: DesktopReclaim, scope: UnitScope, tmp_path: Path
) -> None:
    files = _files(desktop, scope)
    written = write_files(files, tmp_path).written
    readme = (tmp_path / README_NAME).read_text()
    lines = _shell_lines(readme)
    others = [f for f in files.values() if f.name != README_NAME]
    assert {p.name for p in written} == {f.name for f in others} | {README_NAME}
    for f in others:
        assert _install_line(f) in lines, f"no install command for {f.name}"
    script = "\n".join(lines)
    assert subprocess.run(["bash", "-n", "-c", script], check=False).returncode == 0


def test_session_readme_says_how_to_use_and_undo_the_session() -> None:
    readme = _files(DesktopReclaim.LLVMPIPE, UnitScope.USER)["readme"].text
    assert "choose the new session on the login screen" in readme
    assert "To switch back, choose your usual" in readme


def test_nvidia_profile_readme_says_how_to_undo_it() -> None:
    files = _files(DesktopReclaim.NVIDIA_PROFILE, UnitScope.SYSTEM)
    readme = files["readme"].text
    assert f"To switch back, delete `{files['nvidia-profile'].install_path}`" in readme
    assert "login screen" not in readme


def test_install_commands_quote_paths_with_spaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "al ice"
    for name, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share")):
        monkeypatch.setenv(name, str(home / sub))
    monkeypatch.setenv("HOME", str(home))
    files = _files(DesktopReclaim.NONE, UnitScope.USER)
    lines = _shell_lines(files["readme"].text)
    for key in ("unit", "env", "script"):
        assert " " in str(files[key].install_path)
        line = _install_line(files[key])
        assert line in lines and shlex.split(line)[-1] == str(files[key].install_path)
