"""The project README says only true things about the repository and the commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.argv import launch_spec

from mtpstudio.core.desktop.session_files import SessionSettings
from mtpstudio.core.engines.registry import documented_build
from mtpstudio.core.plan.choices import DesktopReclaim, EngineFlavour
from mtpstudio.core.plan.io import plan_from_dict
from mtpstudio.core.service.export import render_all
from mtpstudio.core.service.render import UnitScope
from tests.support.readme_layout import layout_entries, missing_layout_paths

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def test_every_path_in_the_layout_exists() -> None:
    entries = layout_entries(README)
    assert len(entries) > 20 and sum(len(e.named) for e in entries) > 100  # the tree was read
    assert missing_layout_paths(README, REPO) == []


def test_the_layout_tree_puts_each_entry_in_its_folder_and_reports_what_is_gone(
    tmp_path: Path,
) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "mod.py").write_text("")
    (tmp_path / "top.py").write_text("")
    readme = (
        "# x\n\n## Layout\n\n```text\n"
        "pkg/          the package\n"
        "├── sub/      `mod.py`, `gone.py`, `LaunchSpec` and `top.py/x` not\n"
        "│   └── deep/\n"
        "└── other.py  a file, with `pkg/sub/mod.py` from the root\n"
        "extra/        `x/`\n```\n\n## Next\n\n```text\nnot/  read\n```\n"
    )
    paths = [e.path for e in layout_entries(readme)]
    assert paths == ["pkg/", "pkg/sub/", "pkg/sub/deep/", "pkg/other.py", "extra/"]
    assert missing_layout_paths(readme, tmp_path) == [
        "pkg/sub/gone.py", "top.py/x", "pkg/sub/deep/", "pkg/other.py", "extra/", "extra/x/",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="sits under no folder"):
        layout_entries("## Layout\n```text\na.py  x\n    b.py  y\n```\n")


@pytest.mark.parametrize("desktop", list(DesktopReclaim))
def test_readme_says_which_desktop_choice_makes_render_write_more(desktop: DesktopReclaim) -> None:
    plan = plan_from_dict({"model": {"path": "/m/x.gguf", "card": None}, "desktop": desktop.value})
    spec = launch_spec(plan, documented_build(EngineFlavour.UPSTREAM, Path("/x/llama-server")))
    session = SessionSettings(igpu_card="/dev/dri/by-path/pci-0000:00:02.0-card")
    files = render_all(plan, spec, scope=UnitScope.USER, user=None, session=session)
    extra = set(files) - {"unit", "env", "script", "readme"}
    said = f"--desktop {desktop.value}" in README
    assert said == bool(extra), (desktop.value, sorted(extra))
