"""Parse the buffer-size lines a llama-server prints while loading (both engines)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_MODEL_BUF_UP = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB")
_MODEL_BUF_IK = re.compile(r"llm_load_tensors:\s+(\S+) buffer size =\s+([\d.]+) MiB")
_CTX_START = re.compile(r"(llama_context: n_seq_max\s+=|llama_init_from_model: n_ctx\s+=)")
_MTP_START = re.compile(r"creating MTP draft context")
_KV = re.compile(r"(?:llama_kv_cache|llama_kv_cache_init):\s+(\S+) KV buffer size =\s+([\d.]+) MiB")
_RS = re.compile(r"llama_memory_recurrent:\s+(\S+) RS buffer size =\s+([\d.]+) MiB")
_OUT = re.compile(r":\s+(\S+)\s+output buffer size =\s+([\d.]+) MiB")
_COMPUTE = re.compile(r":\s+(\S+) compute buffer size =\s+([\d.]+) MiB")
_N_CTX = re.compile(r"(?:llama_context|llama_init_from_model): n_ctx\s+=\s+(\d+)")


@dataclass
class ContextBuffers:
    """Buffers of one llama_context (the main one, or the MTP draft context)."""

    kind: str
    n_ctx: int | None = None
    kv: dict[str, float] = field(default_factory=dict)
    recurrent: dict[str, float] = field(default_factory=dict)
    output: dict[str, float] = field(default_factory=dict)
    compute: dict[str, float] = field(default_factory=dict)


@dataclass
class LoadReport:
    """Every buffer the engine reported, in MiB as printed (two decimals)."""

    model: dict[str, float] = field(default_factory=dict)
    contexts: list[ContextBuffers] = field(default_factory=list)

    def context(self, kind: str) -> ContextBuffers | None:
        """The first context of ``kind`` (``main`` or ``mtp``)."""
        return next((c for c in self.contexts if c.kind == kind), None)


def _add(target: dict[str, float], name: str, value: str) -> None:
    target[name] = target.get(name, 0.0) + float(value)


def parse_load_log(text: str) -> LoadReport:
    """Collect model, KV, recurrent-state, output and compute buffer sizes from a server log.

    A context starts at its ``n_seq_max``/``n_ctx`` line; one announced by ``creating MTP draft
    context`` is the MTP context. A compute buffer reserved twice keeps the larger size.
    """
    report = LoadReport()
    current: ContextBuffers | None = None
    next_kind = "main"
    for line in text.splitlines():
        if _MTP_START.search(line):
            next_kind = "mtp"
            continue
        if _CTX_START.search(line):
            current = ContextBuffers(kind=next_kind)
            report.contexts.append(current)
            next_kind = "main" if next_kind == "mtp" else next_kind
        if current is not None and current.n_ctx is None and (m := _N_CTX.search(line)):
            current.n_ctx = int(m.group(1))
        if m := _MODEL_BUF_UP.search(line) or _MODEL_BUF_IK.search(line):
            _add(report.model, m.group(1), m.group(2))
        elif current is None:
            continue
        elif m := _KV.search(line):
            _add(current.kv, m.group(1), m.group(2))
        elif m := _RS.search(line):
            _add(current.recurrent, m.group(1), m.group(2))
        elif m := _OUT.search(line):
            _add(current.output, m.group(1), m.group(2))
        elif m := _COMPUTE.search(line):
            current.compute[m.group(1)] = max(
                current.compute.get(m.group(1), 0.0), float(m.group(2))
            )
    return report
