"""Tiny random-weight GGUF models that both llama-server builds load, written with ``gguf``.

Kinds (``MODEL_KINDS``):

* ``dense``      -- llama architecture with grouped-query attention.
* ``draft``      -- a smaller llama sharing the vocabulary of ``dense`` (a speculative draft pair).
* ``moe``        -- qwen3moe: attention plus routed experts.
* ``hybrid-mtp`` -- qwen35moe: gated delta-net and gated full-attention layers, routed and shared
  experts, plus one MTP (nextn) block after the trunk (``block_count = n_layer + 1``). Upstream
  only: ik_llama.cpp treats every block as a trunk layer and cannot load it.
* ``hybrid``     -- the same qwen35moe trunk without the MTP block (what ik_llama.cpp loads).

The vocabulary is a sentencepiece ("llama") vocabulary made only of complete UTF-8 pieces:
control tokens, three byte tokens (tab, newline, carriage return), ``▁``, every printable ASCII
character, a few non-ASCII characters and ``▁word``/``word`` pieces. Whatever a random model
generates therefore decodes to valid UTF-8 (ik answers HTTP 500 otherwise) and the ``▁`` piece
ik needs is there. Prompts must stay within those characters (ASCII is always safe): a character
outside the vocabulary has no byte fallback and fails tokenization.

Everything is deterministic: the vocabulary depends only on ``n_vocab``; each tensor's values
depend on ``seed`` and the tensor's name.

Usage::

    path = make_model("hybrid-mtp", tmp_path / "h.gguf", n_embd=128, dtype="q8_0")
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType, TokenType
from gguf.constants import GGML_QUANT_VERSION
from gguf.quants import quantize

MODEL_KINDS = ("dense", "draft", "moe", "hybrid-mtp", "hybrid")

ARCHITECTURES = {
    "dense": "llama",
    "draft": "llama",
    "moe": "qwen3moe",
    "hybrid-mtp": "qwen35moe",
    "hybrid": "qwen35moe",
}

DTYPES: dict[str, tuple[GGMLQuantizationType, LlamaFileType]] = {
    "f32": (GGMLQuantizationType.F32, LlamaFileType.ALL_F32),
    "f16": (GGMLQuantizationType.F16, LlamaFileType.MOSTLY_F16),
    "q8_0": (GGMLQuantizationType.Q8_0, LlamaFileType.MOSTLY_Q8_0),
}

Q8_0_BLOCK = 32

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# --------------------------------------------------------------------------------------------
# vocabulary

SPACE = "\u2581"  # sentencepiece's word-boundary marker
SPECIAL_TOKENS = (
    ("<unk>", TokenType.UNKNOWN),
    ("<s>", TokenType.CONTROL),
    ("</s>", TokenType.CONTROL),
)
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
BYTE_TOKENS = ("<0x09>", "<0x0A>", "<0x0D>")
NON_ASCII_CHARS = ("é", "ü", "ß", "ñ", "ø", "€", "—", "…")
WORDS = (
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "was",
    "with",
    "as",
    "he",
    "be",
    "at",
    "by",
    "this",
    "had",
    "not",
    "are",
    "but",
    "from",
    "or",
    "have",
    "an",
    "they",
    "which",
    "one",
    "you",
    "were",
    "her",
    "all",
    "she",
    "there",
    "would",
    "their",
    "we",
    "him",
    "been",
    "has",
    "when",
    "who",
    "will",
    "more",
    "no",
    "if",
    "out",
    "so",
    "said",
    "what",
    "up",
    "its",
    "about",
    "into",
    "than",
    "them",
    "can",
    "only",
    "other",
    "new",
    "some",
    "could",
    "time",
    "these",
    "two",
    "may",
    "then",
    "do",
    "first",
    "any",
    "my",
    "now",
    "such",
    "like",
    "our",
    "over",
    "man",
    "me",
    "even",
    "most",
    "made",
    "after",
    "also",
    "did",
    "many",
    "before",
    "must",
    "through",
    "back",
    "years",
    "where",
    "much",
    "your",
    "way",
    "well",
    "down",
    "should",
    "because",
    "each",
    "just",
    "those",
    "people",
    "how",
    "too",
    "little",
    "state",
    "good",
    "very",
    "make",
    "world",
    "still",
    "own",
    "see",
    "men",
    "work",
    "long",
    "get",
    "here",
    "between",
    "both",
    "life",
    "being",
    "under",
    "never",
    "day",
    "same",
    "another",
    "know",
    "while",
    "last",
    "might",
    "us",
    "great",
    "old",
    "year",
    "off",
    "come",
    "since",
    "against",
    "go",
    "came",
    "right",
    "used",
    "take",
    "three",
    "Hello",
    "world",
    "model",
    "token",
    "draft",
    "memory",
    "cache",
    "expert",
    "layer",
    "quick",
    "brown",
    "fox",
    "jumps",
    "lazy",
    "dog",
    "Once",
    "upon",
)


@dataclass(frozen=True)
class Vocabulary:
    """A sentencepiece vocabulary: pieces, scores and token types, index = token id."""

    tokens: tuple[str, ...]
    scores: tuple[float, ...]
    types: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.tokens)


def _base_pieces() -> list[tuple[str, TokenType]]:
    pieces: list[tuple[str, TokenType]] = list(SPECIAL_TOKENS)
    pieces += [(b, TokenType.BYTE) for b in BYTE_TOKENS]
    pieces.append((SPACE, TokenType.NORMAL))
    pieces += [(chr(c), TokenType.NORMAL) for c in range(0x21, 0x7F)]
    pieces += [(c, TokenType.NORMAL) for c in NON_ASCII_CHARS]
    return pieces


MIN_VOCAB = len(_base_pieces()) + 16


def _filler_pieces() -> Iterator[str]:
    for word in WORDS:
        yield SPACE + word
    for word in WORDS:
        yield word
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    for a in letters:
        for b in letters:
            yield SPACE + a + b
            yield a + b
    for a in letters:
        for b in letters:
            for c in letters:
                yield SPACE + a + b + c


def build_vocabulary(n_vocab: int) -> Vocabulary:
    """The first ``n_vocab`` pieces of the fixed piece list (deterministic, all valid UTF-8)."""
    if n_vocab < MIN_VOCAB:
        raise ValueError(f"n_vocab must be at least {MIN_VOCAB}, got {n_vocab}")
    pieces = _base_pieces()
    seen = {p for p, _ in pieces}
    filler = _filler_pieces()
    while len(pieces) < n_vocab:
        try:
            piece = next(filler)
        except StopIteration:  # pragma: no cover - 18k+ pieces available
            raise ValueError(f"n_vocab {n_vocab} is larger than the piece list") from None
        if piece not in seen:
            seen.add(piece)
            pieces.append((piece, TokenType.NORMAL))
    scores = tuple(0.0 if t != TokenType.NORMAL else -float(i) for i, (_, t) in enumerate(pieces))
    return Vocabulary(
        tokens=tuple(p for p, _ in pieces),
        scores=scores,
        types=tuple(int(t) for _, t in pieces),
    )


# --------------------------------------------------------------------------------------------
# parameters


@dataclass(frozen=True)
class TinyModelParams:
    """Sizes of a tiny model. ``None`` fields take the kind's default (see ``KIND_DEFAULTS``).

    Attributes:
        n_embd: hidden size.
        n_layer: trunk layers (the MTP block of ``hybrid-mtp`` comes on top).
        n_head / n_head_kv: query / key-value heads (GQA when different).
        head_dim: per-head size (key_length = value_length); a multiple of 16. Quantized K/V
            caches need a multiple of 32 (64 or 128 also suit flash attention and ik's fused
            delta-net): with 16 the engines refuse them, which tests use as a sure start failure.
        n_ff: dense feed-forward size.
        n_vocab: vocabulary size (models that must pair as draft/target need the same value).
        n_ctx_train: ``context_length`` in the header.
        dtype: ``f32``, ``f16`` or ``q8_0`` for the 2-D/3-D weights; norms, routers, conv and
            SSM scalars stay F32 (as llama-quantize does), as does any tensor whose rows do not
            split into Q8_0 blocks.
        seed: base random seed.
        n_expert / n_expert_used / n_ff_exp: routed experts (moe, hybrid kinds).
        n_ff_shexp: shared-expert feed-forward size (hybrid kinds).
        full_attention_interval: every N-th trunk layer is full attention (hybrid kinds).
        ssm_d_state / ssm_n_group / ssm_dt_rank / ssm_d_conv: gated delta-net sizes; the inner
            size is ``ssm_d_state * ssm_dt_rank`` and ``ssm_dt_rank % ssm_n_group == 0``.
        n_rot: rotary dimensions (defaults: head_dim; hybrid: head_dim // 4, as Qwen3.5).
        rope_freq_base: rope theta.
        rms_eps: RMS-norm epsilon.
        tie_embeddings: leave out ``output.weight`` (the engines then reuse ``token_embd``).
        name: ``general.name``.
    """

    n_embd: int | None = None
    n_layer: int | None = None
    n_head: int | None = None
    n_head_kv: int | None = None
    head_dim: int | None = None
    n_ff: int | None = None
    n_vocab: int = 512
    n_ctx_train: int = 4096
    dtype: str = "f32"
    seed: int = 0
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_exp: int = 64
    n_ff_shexp: int = 64
    full_attention_interval: int = 2
    ssm_d_state: int = 64
    ssm_n_group: int = 1
    ssm_dt_rank: int = 2
    ssm_d_conv: int = 4
    n_rot: int | None = None
    rope_freq_base: float = 10000.0
    rms_eps: float = 1e-6
    tie_embeddings: bool = False
    name: str | None = None

    def resolved(self, kind: str) -> TinyModelParams:
        """These parameters with the kind's defaults filled in, validated."""
        if kind not in KIND_DEFAULTS:
            raise ValueError(f"unknown model kind {kind!r}; choose from {', '.join(MODEL_KINDS)}")
        updates: dict[str, Any] = {
            k: v for k, v in KIND_DEFAULTS[kind].items() if getattr(self, k) is None
        }
        out = dataclasses.replace(self, **updates)
        if out.n_rot is None:
            hd = out.head_dim or 0
            out = dataclasses.replace(out, n_rot=hd // 4 if kind.startswith("hybrid") else hd)
        if out.name is None:
            out = dataclasses.replace(out, name=f"tiny-{kind}")
        out._validate(kind)
        return out

    def _validate(self, kind: str) -> None:
        assert self.n_embd and self.n_layer and self.n_head and self.n_head_kv and self.head_dim
        problems = []
        if self.dtype not in DTYPES:
            problems.append(f"dtype must be one of {', '.join(DTYPES)}")
        if self.head_dim % 16:
            problems.append("head_dim must be a multiple of 16 (32 for quantized K/V caches)")
        if self.n_head % self.n_head_kv:
            problems.append("n_head must be a multiple of n_head_kv")
        if self.n_rot is None or self.n_rot > self.head_dim or self.n_rot % 2:
            problems.append("n_rot must be even and at most head_dim")
        if kind in ("moe", "hybrid", "hybrid-mtp") and not 0 < self.n_expert_used <= self.n_expert:
            problems.append("need 0 < n_expert_used <= n_expert")
        if kind.startswith("hybrid"):
            if self.ssm_dt_rank % self.ssm_n_group:
                problems.append("ssm_dt_rank must be a multiple of ssm_n_group")
            if self.n_rot is not None and self.n_rot % 4:
                problems.append("hybrid n_rot must be a multiple of 4 (rope sections)")
            if self.full_attention_interval < 1:
                problems.append("full_attention_interval must be >= 1")
        if self.dtype == "q8_0" and self.n_embd % Q8_0_BLOCK:
            problems.append("q8_0 needs n_embd to be a multiple of 32")
        if problems:
            raise ValueError(f"bad tiny-model parameters for {kind!r}: " + "; ".join(problems))

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def ssm_d_inner(self) -> int:
        return self.ssm_d_state * self.ssm_dt_rank

    def rope_sections(self) -> list[int]:
        """qwen35moe mrope sections: sum = n_rot / 2, split like Qwen3.5's [11, 11, 10, 0]."""
        assert self.n_rot is not None
        half = self.n_rot // 2
        a = (half + 2) // 3
        b = (half - a + 1) // 2
        return [a, b, half - a - b, 0]


KIND_DEFAULTS: dict[str, dict[str, Any]] = {
    "dense": dict(n_embd=128, n_layer=2, n_head=2, n_head_kv=1, head_dim=64, n_ff=256),
    "draft": dict(n_embd=64, n_layer=1, n_head=1, n_head_kv=1, head_dim=64, n_ff=128),
    "moe": dict(n_embd=128, n_layer=2, n_head=2, n_head_kv=1, head_dim=64, n_ff=256),
    "hybrid-mtp": dict(n_embd=128, n_layer=2, n_head=2, n_head_kv=1, head_dim=64, n_ff=256),
    "hybrid": dict(n_embd=128, n_layer=2, n_head=2, n_head_kv=1, head_dim=64, n_ff=256),
}

# A dense model whose f32 K/V cache at the largest context a Plan allows is 2 TiB: more than any
# machine's RAM and swap, so the engine's allocation fails wherever the tests run (Linux's
# default overcommit heuristic refuses an allocation larger than RAM + swap). The 128 GiB these
# tests asked for before fit in a large workstation, where the server then simply started.
HUGE_KV_MODEL: dict[str, Any] = dict(
    n_embd=32, n_layer=2, n_head=128, n_head_kv=128, head_dim=256, n_ctx_train=4194304
)
HUGE_KV_PLAN: dict[str, Any] = {
    "runtime.ctx": 4194304,
    "runtime.cache_type_k": "f32",
    "runtime.cache_type_v": "f32",
}
HUGE_KV_MIB = (
    HUGE_KV_PLAN["runtime.ctx"] * HUGE_KV_MODEL["n_layer"] * 2  # K and V
    * HUGE_KV_MODEL["n_head_kv"] * HUGE_KV_MODEL["head_dim"] * 4 / 2**20
)  # fmt: skip


# --------------------------------------------------------------------------------------------
# tensors

_KEEP_F32_SUFFIXES = (
    "norm.weight",  # every RMS norm, including nextn.enorm/hnorm and ssm_norm
    "ffn_gate_inp.weight",  # expert router
    "ffn_gate_inp_shexp.weight",
    "ssm_conv1d.weight",
    "ssm_dt.bias",
    "ssm_a",
)


@dataclass
class _TensorPlan:
    """Collects tensors as (name, ggml ne, initialiser) before writing."""

    params: TinyModelParams
    qtype: GGMLQuantizationType
    items: list[tuple[str, tuple[int, ...], str]] = field(default_factory=list)

    def add(self, name: str, ne: tuple[int, ...], init: str = "weight") -> None:
        self.items.append((name, ne, init))

    def arrays(self) -> Iterator[tuple[str, np.ndarray, GGMLQuantizationType]]:
        for name, ne, init in self.items:
            data = _init_values(name, ne, init, self.params.seed)
            qtype = self._type_for(name, ne)
            if qtype == GGMLQuantizationType.F32:
                yield name, data, qtype
            elif qtype == GGMLQuantizationType.F16:
                yield name, data.astype(np.float16), qtype
            else:
                yield name, quantize(data, qtype), qtype

    def _type_for(self, name: str, ne: tuple[int, ...]) -> GGMLQuantizationType:
        if len(ne) < 2 or name.endswith(_KEEP_F32_SUFFIXES):
            return GGMLQuantizationType.F32
        if self.qtype == GGMLQuantizationType.Q8_0 and ne[0] % Q8_0_BLOCK:
            return GGMLQuantizationType.F16
        return self.qtype


def _init_values(name: str, ne: tuple[int, ...], init: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    shape = tuple(reversed(ne))  # numpy order is the reverse of ggml's ne
    if init == "norm":
        values = 1.0 + 0.1 * rng.standard_normal(shape)
    elif init == "ssm_a":  # -exp(A_log): strictly negative decay rates
        values = -np.exp(rng.uniform(-1.0, 1.0, shape))
    elif init == "small":
        values = 0.1 * rng.standard_normal(shape)
    elif init == "embd":
        values = rng.standard_normal(shape)
    else:  # matmul weight, fan-in = ne[0]
        values = rng.standard_normal(shape) / np.sqrt(ne[0])
    return values.astype(np.float32)


def _add_llama_tensors(t: _TensorPlan, p: TinyModelParams) -> None:
    assert p.n_embd and p.head_dim and p.n_head and p.n_head_kv and p.n_ff and p.n_layer
    for i in range(p.n_layer):
        b = f"blk.{i}"
        t.add(f"{b}.attn_norm.weight", (p.n_embd,), "norm")
        t.add(f"{b}.attn_q.weight", (p.n_embd, p.head_dim * p.n_head))
        t.add(f"{b}.attn_k.weight", (p.n_embd, p.head_dim * p.n_head_kv))
        t.add(f"{b}.attn_v.weight", (p.n_embd, p.head_dim * p.n_head_kv))
        t.add(f"{b}.attn_output.weight", (p.head_dim * p.n_head, p.n_embd))
        t.add(f"{b}.ffn_norm.weight", (p.n_embd,), "norm")
        t.add(f"{b}.ffn_gate.weight", (p.n_embd, p.n_ff))
        t.add(f"{b}.ffn_up.weight", (p.n_embd, p.n_ff))
        t.add(f"{b}.ffn_down.weight", (p.n_ff, p.n_embd))


def _add_qwen3moe_tensors(t: _TensorPlan, p: TinyModelParams) -> None:
    assert p.n_embd and p.head_dim and p.n_head and p.n_head_kv and p.n_layer
    for i in range(p.n_layer):
        b = f"blk.{i}"
        t.add(f"{b}.attn_norm.weight", (p.n_embd,), "norm")
        t.add(f"{b}.attn_q.weight", (p.n_embd, p.head_dim * p.n_head))
        t.add(f"{b}.attn_k.weight", (p.n_embd, p.head_dim * p.n_head_kv))
        t.add(f"{b}.attn_v.weight", (p.n_embd, p.head_dim * p.n_head_kv))
        t.add(f"{b}.attn_output.weight", (p.head_dim * p.n_head, p.n_embd))
        t.add(f"{b}.attn_q_norm.weight", (p.head_dim,), "norm")
        t.add(f"{b}.attn_k_norm.weight", (p.head_dim,), "norm")
        t.add(f"{b}.ffn_norm.weight", (p.n_embd,), "norm")
        _add_routed_experts(t, p, b)


def _add_routed_experts(t: _TensorPlan, p: TinyModelParams, b: str) -> None:
    assert p.n_embd
    t.add(f"{b}.ffn_gate_inp.weight", (p.n_embd, p.n_expert))
    t.add(f"{b}.ffn_gate_exps.weight", (p.n_embd, p.n_ff_exp, p.n_expert))
    t.add(f"{b}.ffn_up_exps.weight", (p.n_embd, p.n_ff_exp, p.n_expert))
    t.add(f"{b}.ffn_down_exps.weight", (p.n_ff_exp, p.n_embd, p.n_expert))


def _add_shared_expert(t: _TensorPlan, p: TinyModelParams, b: str) -> None:
    assert p.n_embd
    t.add(f"{b}.ffn_gate_inp_shexp.weight", (p.n_embd,), "small")
    t.add(f"{b}.ffn_gate_shexp.weight", (p.n_embd, p.n_ff_shexp))
    t.add(f"{b}.ffn_up_shexp.weight", (p.n_embd, p.n_ff_shexp))
    t.add(f"{b}.ffn_down_shexp.weight", (p.n_ff_shexp, p.n_embd))


def _add_gated_attention(t: _TensorPlan, p: TinyModelParams, b: str) -> None:
    assert p.n_embd and p.head_dim and p.n_head and p.n_head_kv
    t.add(f"{b}.attn_q.weight", (p.n_embd, p.head_dim * p.n_head * 2))  # query + output gate
    t.add(f"{b}.attn_k.weight", (p.n_embd, p.head_dim * p.n_head_kv))
    t.add(f"{b}.attn_v.weight", (p.n_embd, p.head_dim * p.n_head_kv))
    t.add(f"{b}.attn_output.weight", (p.head_dim * p.n_head, p.n_embd))
    t.add(f"{b}.attn_q_norm.weight", (p.head_dim,), "norm")
    t.add(f"{b}.attn_k_norm.weight", (p.head_dim,), "norm")


def _add_qwen35moe_tensors(t: _TensorPlan, p: TinyModelParams, with_mtp: bool) -> None:
    assert p.n_embd and p.n_layer
    key_dim = p.ssm_d_state * p.ssm_n_group
    value_dim = p.ssm_d_state * p.ssm_dt_rank
    conv_dim = 2 * key_dim + value_dim
    for i in range(p.n_layer):
        b = f"blk.{i}"
        t.add(f"{b}.attn_norm.weight", (p.n_embd,), "norm")
        t.add(f"{b}.post_attention_norm.weight", (p.n_embd,), "norm")
        if is_recurrent_layer(p, i):
            t.add(f"{b}.attn_qkv.weight", (p.n_embd, conv_dim))
            t.add(f"{b}.attn_gate.weight", (p.n_embd, value_dim))
            t.add(f"{b}.ssm_conv1d.weight", (p.ssm_d_conv, conv_dim), "small")
            t.add(f"{b}.ssm_dt.bias", (p.ssm_dt_rank,), "small")
            t.add(f"{b}.ssm_a", (p.ssm_dt_rank,), "ssm_a")
            t.add(f"{b}.ssm_beta.weight", (p.n_embd, p.ssm_dt_rank))
            t.add(f"{b}.ssm_alpha.weight", (p.n_embd, p.ssm_dt_rank))
            t.add(f"{b}.ssm_norm.weight", (p.ssm_d_state,), "norm")
            t.add(f"{b}.ssm_out.weight", (value_dim, p.n_embd))
        else:
            _add_gated_attention(t, p, b)
        _add_routed_experts(t, p, b)
        _add_shared_expert(t, p, b)
    if with_mtp:
        b = f"blk.{p.n_layer}"
        t.add(f"{b}.attn_norm.weight", (p.n_embd,), "norm")
        t.add(f"{b}.post_attention_norm.weight", (p.n_embd,), "norm")
        _add_gated_attention(t, p, b)
        _add_routed_experts(t, p, b)
        _add_shared_expert(t, p, b)
        t.add(f"{b}.nextn.eh_proj.weight", (2 * p.n_embd, p.n_embd))
        t.add(f"{b}.nextn.enorm.weight", (p.n_embd,), "norm")
        t.add(f"{b}.nextn.hnorm.weight", (p.n_embd,), "norm")
        t.add(f"{b}.nextn.shared_head_norm.weight", (p.n_embd,), "norm")


def is_recurrent_layer(p: TinyModelParams, il: int) -> bool:
    """qwen35moe rule shared by both engines: every interval-th trunk layer is attention."""
    return (il + 1) % p.full_attention_interval != 0


# --------------------------------------------------------------------------------------------
# writer


def _write_header(w: GGUFWriter, kind: str, p: TinyModelParams, ftype: LlamaFileType) -> None:
    assert p.n_embd and p.n_layer and p.n_head and p.n_head_kv and p.head_dim and p.n_ff
    assert p.n_rot is not None and p.name
    with_mtp = kind == "hybrid-mtp"
    w.add_name(p.name)
    w.add_description(
        "mtpstudio tiny random-weight test model: " + json.dumps({"kind": kind, **p.as_dict()})
    )
    w.add_file_type(int(ftype))
    if ftype != LlamaFileType.ALL_F32:
        w.add_quantization_version(GGML_QUANT_VERSION)
    w.add_context_length(p.n_ctx_train)
    w.add_embedding_length(p.n_embd)
    w.add_block_count(p.n_layer + (1 if with_mtp else 0))
    w.add_feed_forward_length(p.n_ff)
    w.add_head_count(p.n_head)
    w.add_head_count_kv(p.n_head_kv)
    w.add_key_length(p.head_dim)
    w.add_value_length(p.head_dim)
    w.add_rope_dimension_count(p.n_rot)
    w.add_rope_freq_base(p.rope_freq_base)
    w.add_layer_norm_rms_eps(p.rms_eps)
    if kind in ("dense", "draft"):
        w.add_vocab_size(p.n_vocab)
    if kind in ("moe", "hybrid", "hybrid-mtp"):
        w.add_expert_count(p.n_expert)
        w.add_expert_used_count(p.n_expert_used)
        w.add_expert_feed_forward_length(p.n_ff_exp)
    if kind.startswith("hybrid"):
        w.add_expert_shared_feed_forward_length(p.n_ff_shexp)
        w.add_full_attention_interval(p.full_attention_interval)
        w.add_rope_dimension_sections(p.rope_sections())
        w.add_ssm_conv_kernel(p.ssm_d_conv)
        w.add_ssm_inner_size(p.ssm_d_inner)
        w.add_ssm_state_size(p.ssm_d_state)
        w.add_ssm_time_step_rank(p.ssm_dt_rank)
        w.add_ssm_group_count(p.ssm_n_group)
    if with_mtp:
        w.add_nextn_predict_layers(1)

    vocab = build_vocabulary(p.n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(list(vocab.tokens))
    w.add_token_scores(list(vocab.scores))
    w.add_token_types(list(vocab.types))
    w.add_unk_token_id(UNK_ID)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)


def make_model(
    kind: str, path: str | Path, params: TinyModelParams | None = None, **overrides: Any
) -> Path:
    """Write a tiny random-weight GGUF of ``kind`` to ``path`` and return the path.

    Args:
        kind: one of ``MODEL_KINDS``.
        path: destination file (parent folders are created).
        params: base parameters; keyword ``overrides`` replace fields of it
            (e.g. ``make_model("moe", p, n_expert=8, dtype="q8_0")``).
    """
    base = params or TinyModelParams()
    p = dataclasses.replace(base, **overrides).resolved(kind)
    qtype, ftype = DTYPES[p.dtype]
    assert p.n_embd
    plan = _TensorPlan(p, qtype)
    plan.add("token_embd.weight", (p.n_embd, p.n_vocab), "embd")
    plan.add("output_norm.weight", (p.n_embd,), "norm")
    if not p.tie_embeddings:
        plan.add("output.weight", (p.n_embd, p.n_vocab))
    if kind in ("dense", "draft"):
        _add_llama_tensors(plan, p)
    elif kind == "moe":
        _add_qwen3moe_tensors(plan, p)
    else:
        _add_qwen35moe_tensors(plan, p, with_mtp=kind == "hybrid-mtp")

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    writer = GGUFWriter(str(tmp), ARCHITECTURES[kind])
    try:
        _write_header(writer, kind, p, ftype)
        for name, data, qt in plan.arrays():
            if qt in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
                writer.add_tensor(name, data)
            else:
                writer.add_tensor(name, data, raw_dtype=qt)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    tmp.replace(out)
    return out


def model_key(kind: str, params: TinyModelParams | None = None, **overrides: Any) -> str:
    """A short stable file stem for (kind, parameters), for caches."""
    base = params or TinyModelParams()
    p = dataclasses.replace(base, **overrides).resolved(kind)
    digest = zlib.crc32(json.dumps(p.as_dict(), sort_keys=True).encode()) & 0xFFFFFFFF
    return f"{kind}-{p.dtype}-{digest:08x}"


class TinyModelCache:
    """Generates each distinct (kind, parameters) once into ``root`` and reuses the file."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._made: dict[str, Path] = {}

    def __call__(self, kind: str, params: TinyModelParams | None = None, **overrides: Any) -> Path:
        key = model_key(kind, params, **overrides)
        if key not in self._made:
            self._made[key] = make_model(kind, self.root / f"{key}.gguf", params, **overrides)
        return self._made[key]
