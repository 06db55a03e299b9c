"""The wheel ships every package, the templates and the resources."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_python_package_is_listed_for_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "mtpstudio").rglob("__init__.py")
    }
    assert found - listed == set()
    assert {"mtpstudio.templates", "mtpstudio.resources"} <= listed


def test_templates_and_resources_load_through_importlib_resources() -> None:
    templates = resources.files("mtpstudio.templates")
    assert templates.joinpath("launch.sh.j2").is_file()
    assert templates.joinpath("export/README.md.j2").is_file()
    icons = resources.files("mtpstudio.resources").joinpath("icons")
    assert icons.joinpath("mtpstudio.svg").is_file()
    assert resources.files("mtpstudio.resources").joinpath("catalog/gpus.json").is_file()
