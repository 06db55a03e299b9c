"""The project README says only true things about the repository and the commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mtpstudio.core.desktop.session_files import SessionSettings
from mtpstudio.core.engines.registry import build_launch_spec, documented_build
from mtpstudio.core.plan.choices import DesktopReclaim, EngineFlavour
from mtpstudio.core.plan.io import plan_from_dict
from mtpstudio.core.service.export import render_all
from mtpstudio.core.service.render import UnitScope

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def _layout_rows() -> list[tuple[list[str], str]]:
    section = README.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[1]))
    return rows


def test_every_path_in_the_layout_exists() -> None:
    rows = _layout_rows()
    assert len(rows) >= 5
    for paths, what in rows:
        for path in paths:
            assert (REPO / path).exists(), f"README Layout lists {path}, which does not exist"
            if path.endswith("/"):  # names it points into: `plan.py`, `model/`
                for name in re.findall(r"`([\w.]+/?)`", what):
                    if name.endswith((".py", "/")):
                        assert (REPO / path / name).exists(), f"{path}{name} does not exist"


@pytest.mark.parametrize("desktop", list(DesktopReclaim))
def test_readme_says_which_desktop_choice_makes_render_write_more(desktop: DesktopReclaim) -> None:
    plan = plan_from_dict({"model": {"path": "/m/x.gguf", "card": None}, "desktop": desktop.value})
    spec = build_launch_spec(
        plan, documented_build(EngineFlavour.UPSTREAM, Path("/x/llama-server"))
    )
    session = SessionSettings(igpu_card="/dev/dri/by-path/pci-0000:00:02.0-card")
    files = render_all(plan, spec, scope=UnitScope.USER, user=None, session=session)
    extra = set(files) - {"unit", "env", "script", "readme"}
    said = f"--desktop {desktop.value}" in README
    assert said == bool(extra), (desktop.value, sorted(extra))
