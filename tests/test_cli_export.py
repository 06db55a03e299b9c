"""`mtpstudio render` and `mtpstudio export-unit`, run as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

from test_cli import run_cli


def write_model(path: Path) -> Path:
    """A loadable model file: the zero-weight full-size 35B (sparse; units need a real file)."""
    from mtpstudio.testing.zero_gguf import zero_gguf_for_card

    return zero_gguf_for_card("qwen3.6-35b-a3b-iq4_xs", path)


def test_render_writes_every_file_and_a_readme(tmp_path: Path) -> None:
    model = tmp_path / "models dir" / "Qwen 3.6 “35B” $HOME%.gguf"
    write_model(model)
    plan = tmp_path / "plan.json"
    # a GPU target (a machine without one would plan, and render, for the CPU)
    made = run_cli("plan", "--model", str(model), "--ctx", "65536", "--n-cpu-moe", "24",
                   "--gpu", "rtx-4070-super", "--desktop", "llvmpipe",
                   "--save", str(plan))  # fmt: skip
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
    assert run_cli("plan", "--model", str(model), "--save", str(plan)).returncode == 0
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
