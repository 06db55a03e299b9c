"""`mtpstudio render` and `mtpstudio export-unit`, run as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import run_cli, write_model
from support.servers import engine_binary


def test_render_writes_every_file_and_a_readme(tmp_path: Path) -> None:
    model = tmp_path / "models dir" / "Qwen 3.6 “35B” $HOME%.gguf"
    write_model(model)
    plan = tmp_path / "plan.json"
    # a GPU target (a machine without one would plan, and render, for the CPU)
    made = run_cli("plan", "--model", str(model), "--ctx", "65536", "--n-cpu-moe", "24",
                   "--gpu", "rtx-4070-super", "--desktop", "llvmpipe",
                   "--engine", str(engine_binary("upstream")), "--save", str(plan))  # fmt: skip
    assert made.returncode == 0, made.stderr
    out = tmp_path / "export here"
    result = run_cli("render", "--plan", str(plan), "--out", str(out), "--user", "alice")
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([
        "README.md", "mtpstudio-llama.service", "mtpstudio-llama.env", "mtpstudio-llama.sh",
        "plasmawayland-llvmpipe-mtpstudio.desktop", "startplasma-wayland-llvmpipe-mtpstudio",
    ])  # fmt: skip
    unit = (out / "mtpstudio-llama.service").read_text()
    assert "-c 65536" in unit and "--n-cpu-moe 24" in unit
    assert "%%" in unit  # the % in the model path is escaped for systemd
    readme = (out / "README.md").read_text()
    assert "systemctl enable --now mtpstudio-llama.service" in readme
    assert (out / "mtpstudio-llama.sh").stat().st_mode & 0o111

    # Rendering a changed plan keeps the old files aside instead of losing them.
    data = json.loads(plan.read_text())
    data["runtime"]["ctx"] = 32768
    plan.write_text(json.dumps(data))
    again = run_cli("render", "--plan", str(plan), "--out", str(out), "--user", "alice")
    assert again.returncode == 0, again.stderr
    backups = sorted(p.name for p in out.iterdir() if ".bak-" in p.name)
    assert any(b.startswith("mtpstudio-llama.service.bak-") for b in backups)
    assert "-c 32768" in (out / "mtpstudio-llama.service").read_text()


def test_export_unit_is_the_same_unit_render_writes(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    write_model(model)
    plan = tmp_path / "plan.json"
    made = run_cli("plan", "--model", str(model), "--engine", str(engine_binary("upstream")),
                   "--save", str(plan))  # fmt: skip
    assert made.returncode == 0, made.stderr
    unit = tmp_path / "one.service"
    result = run_cli("export-unit", "--plan", str(plan), "-o", str(unit), "--user", "bob")
    assert result.returncode == 0, result.stderr
    out = tmp_path / "all"
    assert (
        run_cli("render", "--plan", str(plan), "--out", str(out), "--user", "bob").returncode == 0
    )
    assert unit.read_bytes() == (out / "mtpstudio-llama.service").read_bytes()


def test_render_with_a_missing_plan_is_one_line(tmp_path: Path) -> None:
    result = run_cli("render", "--plan", str(tmp_path / "nope.json"), "--out", str(tmp_path))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "does not exist" in result.stderr


# -- issue 34: Export writes what starts ----------------------------------------------------------


def test_export_unit_writes_the_set_that_installs_and_starts(tmp_path: Path) -> None:
    """The unit, the env file it names and the install script, with the exact commands; the
    unit passes the real `systemd-analyze verify` (its ExecStart exists)."""
    import shutil
    import subprocess

    model = tmp_path / "m.gguf"
    write_model(model)
    plan = tmp_path / "plan.json"
    made = run_cli("plan", "--model", str(model), "--engine", str(engine_binary("upstream")),
                   "--save", str(plan))  # fmt: skip
    assert made.returncode == 0, made.stderr
    out = tmp_path / "set"
    result = run_cli("export-unit", "--plan", str(plan), "--out", str(out), "--user", "bob")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "install-mtpstudio-llama.sh", "mtpstudio-llama.env", "mtpstudio-llama.service"
    ]  # fmt: skip
    unit = (out / "mtpstudio-llama.service").read_text()
    assert "EnvironmentFile=/etc/mtpstudio/mtpstudio-llama.env" in unit and "User=bob" in unit
    script = (out / "install-mtpstudio-llama.sh").read_text()
    assert "install -D -m 0644 mtpstudio-llama.env /etc/mtpstudio/mtpstudio-llama.env" in script
    assert ("install -D -m 0644 mtpstudio-llama.service "
            "/etc/systemd/system/mtpstudio-llama.service") in script  # fmt: skip
    assert "systemctl daemon-reload" in script
    assert f"sudo sh {out}/install-mtpstudio-llama.sh\n" in result.stdout
    assert "sudo systemctl start mtpstudio-llama.service" in result.stdout
    assert subprocess.run(["sh", "-n", str(out / "install-mtpstudio-llama.sh")]).returncode == 0
    verify = subprocess.run(
        [shutil.which("systemd-analyze") or "systemd-analyze", "verify",
         str(out / "mtpstudio-llama.service")], capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "is not executable" not in verify.stderr, verify.stderr


def test_a_unit_that_would_not_start_is_refused_with_what_to_do(tmp_path: Path) -> None:
    """No engine build found (ExecStart the documented /usr/local/bin path), or a system
    unit for root: refused in one sentence, nothing written."""
    model = tmp_path / "m.gguf"
    write_model(model)
    plan = tmp_path / "plan.json"
    assert run_cli("plan", "--model", str(model), "--save", str(plan)).returncode == 0
    data = json.loads(plan.read_text())
    data["engine"]["binary"] = str(tmp_path / "gone" / "llama-server")  # a build since removed
    plan.write_text(json.dumps(data))
    out = tmp_path / "set"
    result = run_cli("export-unit", "--plan", str(plan), "--out", str(out), "--user", "bob")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert f"the unit would start {tmp_path}/gone/llama-server" in result.stderr
    assert "Pick the engine" in result.stderr and "cmake --build" in result.stderr
    assert not out.exists()

    data["engine"]["binary"] = str(engine_binary("upstream"))
    plan.write_text(json.dumps(data))
    as_root = run_cli("export-unit", "--plan", str(plan), "--out", str(out), "--user", "root")
    assert as_root.returncode == 2
    assert "runs the engine as root is refused" in as_root.stderr
    assert "--user NAME" in as_root.stderr
    assert not out.exists()
