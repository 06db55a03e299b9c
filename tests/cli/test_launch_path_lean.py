"""The launch path stays lean: its own GGUF tables, no numpy/gguf/httpx, one CLI module; and
`mtpstudio --help` and a one-line error load none of the heavy libraries (start-up cost)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, LlamaFileType
from support.gguf_builders import KV, VT, write_gguf

from mtpstudio.cli.main import COMMAND_MODULES, build_parser, command_of
from mtpstudio.core.model import ggml_types
from mtpstudio.core.model.gguf import read_gguf


def test_the_format_tables_agree_with_the_gguf_package() -> None:
    assert {v.name: v.value for v in ggml_types.GGUFValueType} == {
        v.name: v.value for v in GGUFValueType
    }
    # gguf knows upstream's numbering; ik_llama.cpp's own types and file types come on top
    # (tests/catalog/test_quant_rules.py reads those back from ik's sources)
    sized = {q.value: (q.name, *GGML_QUANT_SIZES[q]) for q in GGMLQuantizationType
             if q in GGML_QUANT_SIZES}  # fmt: skip
    ik_types = {133, 137, 138, 139, 140, 141, 144, 146, 152}
    assert set(ggml_types.TENSOR_TYPES) - set(sized) == ik_types
    assert {k: v for k, v in ggml_types.TENSOR_TYPES.items() if k not in ik_types} == sized
    files = {f.value: f.name for f in LlamaFileType}
    assert {k: v for k, v in ggml_types.FILE_TYPES.items() if k in files} == files
    extra = {k: v for k, v in ggml_types.FILE_TYPES.items() if k not in files}
    assert extra and all(ggml_types.IK_FILE_TYPES[k] == v for k, v in extra.items())  # ik's
    # the catalogue's quant types, named without gguf: gguf's ids for every type ggml sizes
    assert {t.name: t.value for t in ggml_types.GGMLType if t.value not in ik_types} == {
        q.name: q.value for q in GGMLQuantizationType if q in GGML_QUANT_SIZES
    }


def _subcommands(parser) -> set[str]:  # type: ignore[no-untyped-def]
    action = next(a for a in parser._actions if a.dest == "command")
    return set(action.choices)


def test_every_subcommand_is_mapped_to_its_module() -> None:
    assert _subcommands(build_parser()) == set(COMMAND_MODULES)
    for command in COMMAND_MODULES:
        assert command in _subcommands(build_parser(command))
    assert command_of(["launch", "--plan", "p"]) == "launch"
    assert command_of(["--version"]) is None and command_of([]) is None
    assert command_of(["nonsense"]) is None


def _run(code: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_string_arrays_are_read_without_numpy_in_a_fresh_interpreter(tmp_path: Path) -> None:
    tokens = ["", "a\x00b", "x" * 300, *(f"tok{i}" for i in range(2000)), "é\u2581end"]
    [path] = write_gguf(tmp_path / "m.gguf", kv=[
        KV("tokenizer.ggml.tokens", tokens, VT.ARRAY, VT.STRING),
        KV("after", 7, VT.UINT32),
    ])  # fmt: skip
    code = (
        "import json, sys\n"
        "from mtpstudio.core.model.gguf import read_gguf\n"
        f"g = read_gguf({str(path)!r})\n"
        "tok = g.metadata['tokenizer.ggml.tokens']\n"
        "print(json.dumps({'numpy': 'numpy' in sys.modules, 'tokens': tok.to_list(),\n"
        "                  'last': tok[-1], 'after': g.metadata['after']}))\n"
    )
    seen = _run(code)
    assert seen["numpy"] is False
    assert seen["tokens"] == tokens and seen["last"] == tokens[-1] and seen["after"] == 7
    # The same file read here, where numpy is loaded (the vectorised scan), agrees.
    assert "numpy" in sys.modules
    assert read_gguf(path).metadata["tokenizer.ggml.tokens"] == tokens


def test_a_truncated_string_array_fails_the_same_way_on_both_paths(tmp_path: Path) -> None:
    tokens = [f"tok{i}" for i in range(1000)]
    [path] = write_gguf(tmp_path / "m.gguf", kv=[
        KV("tokenizer.ggml.tokens", tokens, VT.ARRAY, VT.STRING),
    ])  # fmt: skip
    cut = tmp_path / "cut.gguf"
    data = bytearray(path.read_bytes())
    at = data.index(b"tok500") - 8  # element 500's length: far beyond the end of the file
    data[at : at + 8] = (1 << 40).to_bytes(8, "little")
    cut.write_bytes(bytes(data))
    code = (
        "import json, sys\n"
        "from mtpstudio.core.errors import GgufError\n"
        "from mtpstudio.core.model.gguf import read_gguf\n"
        "try:\n"
        f"    read_gguf({str(cut)!r})\n"
        "    print(json.dumps({'error': None}))\n"
        "except GgufError as exc:\n"
        "    print(json.dumps({'error': str(exc), 'numpy': 'numpy' in sys.modules}))\n"
    )
    seen = _run(code)
    assert seen["numpy"] is False
    with pytest.raises(Exception) as here:
        read_gguf(cut)
    assert seen["error"] == str(here.value)
    assert "element 500 of array" in str(here.value)


def test_the_launch_path_imports_no_numpy_gguf_or_httpx(tiny_model) -> None:  # type: ignore[no-untyped-def]
    model = tiny_model("dense")
    code = (
        "import json, sys\n"
        "from mtpstudio.cli.main import build_parser\n"
        "build_parser('launch')\n"
        "from mtpstudio.core.usecases.launch import find_build, prepare_launch, run_launch\n"
        "from mtpstudio.core.server.preflight import check_model\n"
        f"info = check_model(__import__('pathlib').Path({str(model)!r}))\n"
        "heavy = [m for m in ('numpy', 'gguf', 'httpx', 'yaml', 'jinja2', 'PySide6')\n"
        "         if m in sys.modules]\n"
        "print(json.dumps({'heavy': heavy, 'arch': info.architecture}))\n"
    )
    seen = _run(code)
    assert seen == {"heavy": [], "arch": "llama"}


HEAVY = ("pydantic", "jinja2", "httpx", "numpy", "gguf", "PySide6", "psutil", "huggingface_hub")


def _heavy_after(args: list[str]) -> dict[str, object]:
    """Run ``mtpstudio ARGS`` in a fresh interpreter; the heavy libraries it loaded, its exit."""
    code = (
        "import json, runpy, sys\n"
        f"sys.argv = ['mtpstudio', *{args!r}]\n"
        "try:\n"
        "    runpy.run_module('mtpstudio', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(json.dumps({'heavy': heavy, 'exit': code}))\n"
    )
    return _run(code)


def test_help_loads_no_heavy_library() -> None:
    """Every subcommand registers (argparse) without importing what its body runs."""
    assert _heavy_after(["--help"]) == {"heavy": [], "exit": 0}
    assert _heavy_after(["bench", "--help"]) == {"heavy": [], "exit": 0}


def test_a_one_line_error_on_a_model_loads_only_the_plan_model(tmp_path: Path) -> None:
    """Rejecting an empty GGUF reads the options and the file before the planner loads: of the
    heavy libraries only pydantic (the Plan) is imported."""
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    assert _heavy_after(["plan", "--model", str(empty)]) == {"heavy": ["pydantic"], "exit": 2}
