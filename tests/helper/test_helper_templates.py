"""Units, environment files and login sessions come from the templates in ``templates/`` (issue
46, step 6): rendered by the helper's sandboxed environment from a checked shape, then read
back and compared with the shape field by field before anything is returned or installed."""

from __future__ import annotations

import ast
from pathlib import Path

import jinja2
import pytest

from mtpstudio.core.quoting import RenderError
from mtpstudio.helper import session_shape, templating, unit_shape
from mtpstudio.helper.prestart_shape import PrestartShape
from mtpstudio.helper.session_shape import SessionShape
from mtpstudio.helper.templating import render_template, template_environment
from mtpstudio.helper.unit_shape import UnitShape, check_rendered_unit, render_env, render_unit

REPO = Path(__file__).resolve().parents[2]
ENGINE = "/home/ada/llama.cpp/build/bin/llama-server"
PRESTART = PrestartShape(
    python="/usr/bin/python3",
    unit="mtpstudio-llama.service",
    needs=(("CUDA0", 11800, 700),),
    on_short="fit",
    flags=("-c", "--n-cpu-moe"),
    port=8080,
    loads=(("CUDA0", 11500),),
    placement=("--n-cpu-moe", "27"),
    fallback=("--fit", "on"),
)
SYSTEM = UnitShape(
    system=True,
    unit_name="mtpstudio-llama.service",
    env_path="/etc/mtpstudio/mtpstudio-llama.env",
    user="ada",
    model_file="Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf",
    argv=(ENGINE, "-m", "/home/ada/models/Qwen 3.6/q4.gguf", "-c", "131072"),
    arg_groups=(2, 2),
    notes=(("-c 131072", "the context, in tokens"),),
    warnings=("the card is shared with the desktop",),
    mlock=True,
    env=(("CUDA_VISIBLE_DEVICES", "0"),),
    prestart=PRESTART,
)
USER = UnitShape(
    system=False,
    unit_name="glm-air.service",
    env_path="/home/ada/.config/mtpstudio/glm-air.env",
    user=None,
    model_file="GLM-4.5-Air-Q4_K_M.gguf",
    argv=(ENGINE, "-m", "/home/ada/models/glm.gguf"),
)
SESSION = SessionShape(
    "wayland-llvmpipe",
    "/usr/share/wayland-sessions",
    ("/usr/bin/startplasma-wayland",),
    plasma_source="/usr/share/wayland-sessions/plasmawayland.desktop",
    llvmpipe_threads=4,
)


def test_each_file_comes_from_its_template() -> None:
    # a line of fixed text that only the template holds shows up in the file
    for shape, template in ((SYSTEM, "system"), (USER, "user")):
        source = (REPO / "templates" / "units" / f"{template}.service.j2").read_text()
        assert "# Give up after 3 failed starts" in source
        assert "# Give up after 3 failed starts" in render_unit(shape)
    sessions = REPO / "templates" / "sessions"
    assert "trap cleanup EXIT" in (sessions / "wrapper.sh.j2").read_text()
    assert "trap cleanup EXIT" in session_shape.render_session_wrapper(SESSION)
    assert "DesktopNames=KDE" in (sessions / "session.desktop.j2").read_text()
    assert "DesktopNames=KDE" in session_shape.render_session_desktop(SESSION)


def test_no_unit_or_session_text_is_written_in_python() -> None:
    # the drift issue 46 found cannot come back: no module of the helper or of the service
    # renderer holds a unit's or a session's fixed text (docstrings aside)
    marks = (
        "[Service]\n",
        "[Desktop Entry]\n",
        "\nExecStart=",
        "StartLimitBurst=",
        "#!/bin/bash\n",
    )
    folders = [REPO / "mtpstudio" / "helper", REPO / "mtpstudio" / "core" / "service"]
    found: dict[str, list[str]] = {}
    for path in sorted(p for folder in folders for p in folder.glob("*.py")):
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree) if _has_docstring(n)}  # type: ignore[attr-defined]
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
            ):
                found.setdefault(path.name, []).extend(m for m in marks if m in node.value)
    found = {name: hits for name, hits in found.items() if hits}
    # check_installed_wrapper recognises an installed wrapper by its first line
    assert found == {"session_shape.py": ["#!/bin/bash\n"]}


def _has_docstring(node: ast.AST) -> bool:
    body = getattr(node, "body", None)
    return (
        isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
        and isinstance(body, list)
        and bool(body)
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    )


def test_the_environment_is_sandboxed_and_strict() -> None:
    env = template_environment()
    assert isinstance(env, jinja2.sandbox.ImmutableSandboxedEnvironment)
    assert env.autoescape is False
    with pytest.raises(jinja2.exceptions.SecurityError):
        env.from_string("{{ shape.__class__.__mro__ }}").render(shape=SYSTEM)
    with pytest.raises(jinja2.exceptions.SecurityError):
        env.from_string("{{ words.append('--rpc') }}").render(words=["a"])
    with pytest.raises(RenderError, match=r"units/user.service.j2.*'argv' is undefined"):
        context = unit_shape.unit_context(USER)
        del context["argv"]
        render_template("units/user.service.j2", **context)


def test_a_value_reaches_the_text_only_through_a_quoting_filter() -> None:
    # Description= is systemd text: a % is doubled, a newline refused before anything is built
    shape = UnitShape(**{**SYSTEM.__dict__, "model_file": "q4 100%.gguf"})
    assert "Description=llama-server q4 100%%.gguf (mtpstudio)\n" in render_unit(shape)
    with pytest.raises(RenderError):
        render_unit(UnitShape(**{**SYSTEM.__dict__, "model_file": "q4\n[Service]\nUser=root"}))
    with pytest.raises(RenderError):
        render_env("x.service", [("A", "one\ntwo")])


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (("User=ada\n", "User=root\n"), "User="),
        (("LimitMEMLOCK=infinity\n", ""), "LimitMEMLOCK="),
        (("ExecStartPost=-", "ExecStartPost="), "ExecStartPost="),
        (("--n-cpu-moe 27", "--n-cpu-moe 99"), "MTPSTUDIO_PLACEMENT="),
        (("    -c 131072", "    -c 4096"), "ExecStart="),
        (("IPAddressDeny=any\n", ""), "IPAddressDeny="),
        (("WantedBy=multi-user.target", "WantedBy=graphical.target"), "WantedBy="),
    ],
)
def test_a_unit_that_says_something_else_is_caught(change: tuple[str, str], field: str) -> None:
    text = render_unit(SYSTEM)
    check_rendered_unit(text, SYSTEM)
    old, new = change
    assert old in text
    with pytest.raises(RenderError, match=f"does not say what its plan says \\({field}\\)"):
        check_rendered_unit(text.replace(old, new, 1), SYSTEM)


def test_a_template_that_renders_the_wrong_file_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = templating.render_template

    def swapped(name: str, **context: object) -> str:
        # the user unit's template handed a system unit's values
        return real(name.replace("system", "user"), **context)

    monkeypatch.setattr(unit_shape, "render_template", swapped)
    with pytest.raises(RenderError, match=r"\(User=\)"):
        render_unit(SYSTEM)


def test_a_session_that_says_something_else_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = templating.render_template

    def tampered(old: str, new: str):  # type: ignore[no-untyped-def]
        def render(name: str, **context: object) -> str:
            return real(name, **context).replace(old, new)

        return render

    monkeypatch.setattr(session_shape, "render_template", tampered("=4\n", "=64\n"))
    with pytest.raises(RenderError, match="does not set what its session sets"):
        session_shape.render_session_wrapper(SESSION)
    monkeypatch.setattr(session_shape, "render_template", tampered("Exec=/", "Exec=/tmp/x /"))
    with pytest.raises(RenderError, match="does not say what its session is"):
        session_shape.render_session_desktop(SESSION)
