"""Quoting for units, environment files, shell and .desktop files: exact forms and round trips.

The readers in ``core.quoting`` are the formats' own rules (systemd.syntax(7),
systemd.service(5), systemd's parse_env_file, the Desktop Entry spec); the property tests
write random values and read them back.
"""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtpstudio.core.errors import RenderError
from mtpstudio.core.quoting.checks import check_one_line
from mtpstudio.core.quoting.desktop_entry import (
    desktop_exec_arg,
    desktop_exec_line,
    desktop_string,
    split_desktop_exec,
)
from mtpstudio.core.quoting.env_file import env_file_assignment, parse_env_file
from mtpstudio.core.quoting.shell import shell_join, shell_quote
from mtpstudio.core.quoting.systemd import (
    parse_unit_file,
    split_systemd_command_line,
    systemd_command_line,
    systemd_environment_assignment,
    systemd_exec_arg,
    systemd_path,
    systemd_text,
)

# One-line text: anything printable, spaces, quotes, $, %, backslashes, non-ASCII.
TRICKY = " \"'\\$%;`#*?&|<>()~=,:{}"
line_text = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cc", "Cs"),
        blacklist_characters="\n\r",
    )
    | st.sampled_from(list(TRICKY)),
    max_size=40,
)
nonempty = line_text.filter(bool)
paths = st.builds(
    lambda parts: "/" + "/".join(parts),
    st.lists(line_text.filter(lambda s: s and "/" not in s), min_size=1, max_size=4),
)
programs = paths.filter(lambda p: "$" not in p)


# --------------------------------------------------------------------------------------------
# exact forms


@pytest.mark.parametrize(
    ("arg", "written"),
    [
        ("plain", "plain"),
        ("q8_0", "q8_0"),
        ("", '""'),
        ("a b", '"a b"'),
        ("100%", "100%%"),
        ("$HOME", "$$HOME"),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("it's", '"it\'s"'),
        (";", '";"'),
        ("Modèle_ünïcode.gguf", "Modèle_ünïcode.gguf"),
        ("Modèle ünïcode.gguf", '"Modèle ünïcode.gguf"'),
        ("blk\\.(0|1)\\.ffn=CPU", '"blk\\\\.(0|1)\\\\.ffn=CPU"'),
    ],
)
def test_systemd_exec_arg(arg: str, written: str) -> None:
    assert systemd_exec_arg(arg) == written
    assert split_systemd_command_line("/bin/x " + written) == ["/bin/x", arg]


def test_command_line_layout() -> None:
    argv = ["/opt/llama server/llama-server", "-m", "/m/a b.gguf", "-c", "512", "--cpu-moe"]
    assert systemd_command_line(argv) == (
        '"/opt/llama server/llama-server" -m "/m/a b.gguf" -c 512 --cpu-moe'
    )
    assert systemd_command_line(argv, [2, 2, 1]) == (
        '"/opt/llama server/llama-server" \\\n    -m "/m/a b.gguf" \\\n    -c 512 \\\n    --cpu-moe'
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["relative/llama-server"], "must be absolute"),
        (["/opt/$x/llama-server"], "contains '\\$'"),
        (["/bin/x", "a\nb"], "line break"),
        (["/bin/x", "a\tb"], "control character"),
        (["/bin/x", "a\udcffb"], "not valid UTF-8"),
        ([], "empty command"),
    ],
)
def test_command_line_refusals(argv: list[str], message: str) -> None:
    with pytest.raises(RenderError, match=message):
        systemd_command_line(argv)


def test_other_systemd_values() -> None:
    assert systemd_path("/etc/mtp%/x.env") == "/etc/mtp%%/x.env"
    assert systemd_text("50% of the model") == "50%% of the model"
    assert systemd_environment_assignment("A", 'x "y" 5%\\') == '"A=x \\"y\\" 5%%\\\\"'
    with pytest.raises(RenderError, match="absolute"):
        systemd_path("relative.env")
    with pytest.raises(RenderError, match="backslash"):
        systemd_text("ends with \\")
    with pytest.raises(RenderError, match="not a valid environment variable name"):
        systemd_environment_assignment("1A", "x")


def test_env_file_exact() -> None:
    assert env_file_assignment("MODEL", 'a "b" $c `d` \\e %f') == (
        'MODEL="a \\"b\\" \\$c \\`d\\` \\\\e %f"'
    )
    with pytest.raises(RenderError, match="line break"):
        env_file_assignment("A", "x\ny")


def test_shell_and_desktop_exact() -> None:
    assert shell_quote("it's") == "'it'\"'\"'s'"
    assert shell_join(["/bin/x", "a b", "c"]) == "/bin/x 'a b' c"
    assert desktop_exec_arg("plain") == "plain"
    assert desktop_exec_arg("50%") == "50%%"
    assert desktop_exec_arg("a b") == '"a b"'
    assert desktop_exec_arg("$x") == '"\\$x"'
    assert desktop_exec_line(["/usr/bin/foo", "c\\d", "100%"]) == '/usr/bin/foo "c\\\\\\\\d" 100%%'
    assert desktop_string(" lead\\") == "\\slead\\\\"


def test_check_one_line_names_the_value() -> None:
    with pytest.raises(RenderError, match="the model path contains a line break") as info:
        check_one_line("/m/a\nb.gguf", "the model path")
    assert info.value.hint


def test_unit_reader_joins_continuations_and_skips_comments() -> None:
    text = (
        '# top\n[Service]\nExecStart=/bin/x \\\n  # comment inside\n  -a "b c" \\\\\\\n'
        "  -d\nDescription=ok\n"
    )
    entries = parse_unit_file(text)
    assert entries[0][:2] == ("Service", "ExecStart")
    assert split_systemd_command_line(entries[0][2]) == ["/bin/x", "-a", "b c", "\\", "-d"]
    assert entries[1] == ("Service", "Description", "ok")


def test_reader_rejects_what_systemd_rejects() -> None:
    with pytest.raises(ValueError, match="unbalanced"):
        split_systemd_command_line('/bin/x "open')
    with pytest.raises(ValueError, match="specifier"):
        split_systemd_command_line("/bin/x 100%")


# --------------------------------------------------------------------------------------------
# round trips


@settings(max_examples=400, deadline=None)
@given(program=programs, args=st.lists(line_text, max_size=8), grouped=st.booleans())
def test_exec_start_splits_back_to_the_argv(program: str, args: list[str], grouped: bool) -> None:
    argv = [program, *args]
    groups = [1] * len(args) if grouped and args else None
    written = systemd_command_line(argv, groups)
    unit = f"[Service]\nExecStart={written}\n"
    ((section, key, value),) = parse_unit_file(unit)
    assert (section, key) == ("Service", "ExecStart")
    assert split_systemd_command_line(value) == argv


@settings(max_examples=300, deadline=None)
@given(model=paths, ctx=st.integers(256, 1 << 22), key=nonempty)
def test_model_paths_and_values_round_trip(model: str, ctx: int, key: str) -> None:
    argv = ["/usr/bin/llama-server", "-m", model, "-c", str(ctx), "--api-key", key]
    unit = "[Service]\nExecStart=" + systemd_command_line(argv, [2, 2, 2]) + "\n"
    ((_, _, value),) = parse_unit_file(unit)
    assert split_systemd_command_line(value) == argv


@settings(max_examples=300, deadline=None)
@given(values=st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), line_text))
def test_env_file_round_trip(values: dict[str, str]) -> None:
    text = "# header\n" + "".join(env_file_assignment(k, v) + "\n" for k, v in values.items())
    assert parse_env_file(text) == values


@settings(max_examples=300, deadline=None)
@given(name=st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), value=line_text)
def test_environment_setting_round_trip(name: str, value: str) -> None:
    written = systemd_environment_assignment(name, value)
    # Environment= is unquoted like a command line, without $ handling; % is a specifier.
    words = split_systemd_command_line("/bin/x " + written.replace("$", "$$"))
    assert words == ["/bin/x", f"{name}={value}"]


@settings(max_examples=300, deadline=None)
@given(argv=st.lists(line_text, min_size=1, max_size=6))
def test_desktop_exec_round_trip(argv: list[str]) -> None:
    assert split_desktop_exec(desktop_exec_line(argv)) == argv


@settings(max_examples=300, deadline=None)
@given(argv=st.lists(line_text, min_size=1, max_size=6))
def test_shell_round_trip(argv: list[str]) -> None:
    assert shlex.split(shell_join(argv)) == argv


@settings(max_examples=200, deadline=None)
@given(
    head=line_text,
    control=st.sampled_from(["\n", "\r", "\x00", "\x1b", "\t", "\x7f"]),
    tail=line_text,
)
def test_control_characters_are_refused_everywhere(head: str, control: str, tail: str) -> None:
    value = head + control + tail
    for write in (
        lambda: systemd_exec_arg(value),
        lambda: env_file_assignment("A", value),
        lambda: shell_quote(value),
        lambda: desktop_exec_arg(value),
        lambda: desktop_string(value),
        lambda: systemd_text(value),
    ):
        with pytest.raises(RenderError):
            write()
