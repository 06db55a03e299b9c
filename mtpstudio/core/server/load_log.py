"""Read a llama-server load log (both engines): buffers per device and context, n_ctx,
offloaded layers, fit decisions, whether drafting is active, allocation failures, errors."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mtpstudio.core.server.moe_cache_log import MoeCacheLog, parse_moe_cache_log

_MODEL_BUF_UP = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB")
_MODEL_BUF_IK = re.compile(r"llm_load_tensors:\s+(\S+) buffer size =\s+([\d.]+) MiB")
_CTX_START = re.compile(r"(llama_context: n_seq_max\s+=|llama_init_from_model: n_ctx\s+=)")
_MTP_START = re.compile(r"creating MTP draft context")
# ik since speculative stages announces its MTP context only once it is built: the context just
# read was the MTP one.
_MTP_READY = re.compile(r"common_speculative_state_mtp: MTP context ready")
# A second model load after the main model's buffers is the draft model (upstream announces it
# with "loading draft model"; ik just loads it).
_DRAFT_MODEL_START = re.compile(r"loading draft model|llama_model_loader: loaded meta data")
_KV = re.compile(r"(?:llama_kv_cache|llama_kv_cache_init):\s+(\S+) KV buffer size =\s+([\d.]+) MiB")
_RS = re.compile(r"llama_memory_recurrent:\s+(\S+) RS buffer size =\s+([\d.]+) MiB")
# ik since speculative stages: the recurrent layers' per-step checkpoints for MTP, beside the
# KV buffer that holds ik's recurrent state (so counted with it).
_RS_STEPS = re.compile(
    r"(?:per_step_alloc|checkpoint_alloc_shadows):\s+(\S+) (?:per-step|shadow) "
    r"buffer =\s+([\d.]+) MiB"
)
_OUT = re.compile(r":\s+(\S+)\s+output buffer size =\s+([\d.]+) MiB")
_COMPUTE = re.compile(r":\s+(\S+) compute buffer size =\s+([\d.]+) MiB")
_N_CTX = re.compile(r"(?:llama_context|llama_init_from_model): n_ctx\s+=\s+(\d+)")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_FIT = re.compile(
    r"common_params_fit|common_fit_params|projected to use|cannot meet free memory target|"
    r"context size reduced|Adding experts CPU overrides|Memory use in device|"
    r"Memory required for model tensors|Memory available on all devices|Setting layer \d+ to "
    r"device|Unable to auto-fit|after overriding all MoE tensors|Not enough memory in device|"
    r"Free memory \d+ MiB on device"
)
_MTP_DISABLED = re.compile(
    r"model has 0 NextN layers|MTP will be disabled|"
    r"context type MTP requested but model doesn't contain MTP layers|"
    r"failed to create MTP context|speculative decoding will not be used|"
    r"draft model is not compatible|failed to load draft model|"
    r"Speculative decoding is currently limited to a single server slot|"
    r"MTP is not supported with parallel slots|"
    r"MTP speculative stage requested, but the target package is not a complete"
)
_OOM = re.compile(
    r"cudaMalloc failed: out of memory|CUDA error: out of memory|"
    r"failed to allocate .*buffer|unable to allocate .*buffer|"
    r"failed to initialize the context: failed to allocate|"
    r"llama_kv_cache_init\(\) failed|failed to allocate compute buffers|"
    r"Unable to auto-fit model|still greater than available memory|"
    r"Not enough memory in device|out of memory"
)
_NOT_OOM = re.compile(r"less the required compute buffer|less the .* safety margin")
_ERROR = re.compile(
    r"(^|\s)(E|ERR)\s|error loading model|unable to load model|failed to load model|"
    r"exiting due to model loading error|couldn't bind|error: |invalid argument|"
    r"GGML_ASSERT|terminate called|Segmentation fault"
)
_LOADED = re.compile(r"main: model loaded|llama_server: model loaded|\] model loaded")
_BIND = re.compile(r"couldn't bind")
_SLOTS = re.compile(r"n_slots\s*=\s*(\d+)")  # upstream "n_slots = 1", ik "n_slots=1"
_ALLOC_DEVICE = re.compile(r"on device (\d+)")
_ALLOC_BUFTYPE = re.compile(r"failed to allocate (?:(\S+) )?buffer of size (\d+)")
_ALLOC_MIB = re.compile(r"allocating ([\d.]+) MiB")


@dataclass
class ContextBuffers:
    """Buffers of one llama_context: the main one, the MTP draft context, or a draft model's."""

    kind: str
    n_ctx: int | None = None
    kv: dict[str, float] = field(default_factory=dict)
    recurrent: dict[str, float] = field(default_factory=dict)
    output: dict[str, float] = field(default_factory=dict)
    compute: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class AllocationFailure:
    """One out-of-memory line: which buffer kind failed, on which buffer/device, and the line."""

    what: str  # weights, kv_cache, recurrent_state, compute, output, fit, runtime, unknown
    where: str | None
    line: str
    mib: float | None = None


@dataclass
class LoadReport:
    """Everything the engine reported while loading, in MiB as printed (two decimals).

    ``model`` is the main model's buffers per buffer name (``CUDA0``, ``CPU_Mapped`` …),
    ``draft_model`` a separate draft model's. ``drafting`` is ``mtp``/``draft`` when a draft
    context was created, None otherwise; ``drafting_disabled`` says why the engine dropped it.
    """

    model: dict[str, float] = field(default_factory=dict)
    draft_model: dict[str, float] = field(default_factory=dict)
    contexts: list[ContextBuffers] = field(default_factory=list)
    offloaded_layers: tuple[int, int] | None = None
    fit_lines: list[str] = field(default_factory=list)
    drafting_disabled: list[str] = field(default_factory=list)
    allocation_failures: list[AllocationFailure] = field(default_factory=list)
    error_lines: list[str] = field(default_factory=list)
    loaded: bool = False
    bind_failed: bool = False
    n_slots: int | None = None
    moe_cache: MoeCacheLog = field(default_factory=MoeCacheLog)
    """The MoE cache's lines (``--moe-cache-mib``, upstream b11549 on)."""

    def context(self, kind: str) -> ContextBuffers | None:
        """The first context of ``kind`` (``main``, ``mtp`` or ``draft``)."""
        return next((c for c in self.contexts if c.kind == kind), None)

    @property
    def n_ctx(self) -> int | None:
        main = self.context("main")
        return main.n_ctx if main else None

    @property
    def drafting(self) -> str | None:
        for kind in ("mtp", "draft"):
            if self.context(kind) is not None and not self.drafting_disabled:
                return kind
        return None

    @property
    def out_of_memory(self) -> bool:
        return bool(self.allocation_failures)


def _add(target: dict[str, float], name: str, value: str) -> None:
    target[name] = target.get(name, 0.0) + float(value)


def classify_allocation_failure(line: str) -> AllocationFailure:
    """What an out-of-memory line says failed (weights, KV, recurrent state, compute …)."""
    low = line.lower()
    what = "unknown"
    if "kv cache" in low or "kv_cache_init" in low:
        what = "kv_cache"
    elif "rs cache" in low:
        what = "recurrent_state"
    elif "compute" in low or "gallocr" in low:
        what = "compute"
    elif "output buffer" in low:
        what = "output"
    elif "auto-fit" in low or "moe tensors to cpu" in low or "offload the output layer" in low:
        what = "fit"
    elif "unable to allocate" in low or "alloc_tensor_range" in low or "model" in low:
        what = "weights"
    elif "cuda error: out of memory" in low:
        what = "runtime"
    where: str | None = None
    mib: float | None = None
    if m := _ALLOC_BUFTYPE.search(line):
        where = m.group(1)
        mib = int(m.group(2)) / (1024 * 1024)
    if m := _ALLOC_DEVICE.search(line):
        where = f"CUDA{m.group(1)}" if where is None else where
    if m := _ALLOC_MIB.search(line):
        mib = float(m.group(1))
    if where is None and "cpu_buffer_type" in low:
        where = "CPU"
    return AllocationFailure(what, where, line.strip(), mib)


def _refine(failures: list[AllocationFailure]) -> list[AllocationFailure]:
    """A bare 'failed to allocate buffer' is followed by what it was for: carry that back."""
    known = next((f.what for f in failures if f.what not in ("unknown", "weights")), None)
    where = next((f.where for f in failures if f.where), None)
    out = []
    for f in failures:
        what = known if f.what == "unknown" and known else f.what
        out.append(AllocationFailure(what, f.where or where, f.line, f.mib))
    return out


def parse_load_log(text: str) -> LoadReport:
    """Collect what a server log says about its load.

    A context starts at its ``n_seq_max``/``n_ctx`` line; one announced by ``creating MTP draft
    context`` (upstream), or followed by ``MTP context ready`` (ik since speculative stages), is
    the MTP context; one after ``loading draft model`` belongs to the draft model (as do the
    model buffers that follow that line). A compute buffer reserved twice keeps the
    larger size. ik's ``Free memory … less the required compute buffer`` is a warning about its
    own estimate, not an allocation failure.
    """
    report = LoadReport(moe_cache=parse_moe_cache_log(text))
    current: ContextBuffers | None = None
    next_kind = "main"
    draft_model_loading = False
    failures: list[AllocationFailure] = []
    for line in text.splitlines():
        if _MTP_START.search(line):
            next_kind = "mtp"
            continue
        if _MTP_READY.search(line) and len(report.contexts) > 1 and current is not None:
            current.kind = "mtp"
            continue
        if _DRAFT_MODEL_START.search(line) and report.model and not draft_model_loading:
            next_kind = "draft"
            draft_model_loading = True
            continue
        if _CTX_START.search(line):
            current = ContextBuffers(kind=next_kind)
            report.contexts.append(current)
            next_kind = "main" if next_kind == "mtp" else next_kind
            draft_model_loading = False
        if current is not None and current.n_ctx is None and (m := _N_CTX.search(line)):
            current.n_ctx = int(m.group(1))
        if _FIT.search(line):
            report.fit_lines.append(line.strip())
        if _MTP_DISABLED.search(line):
            report.drafting_disabled.append(line.strip())
        if _OOM.search(line) and not _NOT_OOM.search(line):
            failures.append(classify_allocation_failure(line))
        if _ERROR.search(line) and not _NOT_OOM.search(line):
            report.error_lines.append(line.strip())
        if _LOADED.search(line):
            report.loaded = True
        if _BIND.search(line):
            report.bind_failed = True
        if (m := _SLOTS.search(line)) and report.n_slots is None:
            report.n_slots = int(m.group(1))
        if (m := _OFFLOADED.search(line)) and report.offloaded_layers is None:
            report.offloaded_layers = (int(m.group(1)), int(m.group(2)))
        if m := _MODEL_BUF_UP.search(line) or _MODEL_BUF_IK.search(line):
            target = report.draft_model if draft_model_loading else report.model
            _add(target, m.group(1), m.group(2))
        elif current is None:
            continue
        elif m := _KV.search(line) or _RS_STEPS.search(line):
            _add(current.kv, m.group(1), m.group(2))
        elif m := _RS.search(line):
            _add(current.recurrent, m.group(1), m.group(2))
        elif m := _OUT.search(line):
            _add(current.output, m.group(1), m.group(2))
        elif m := _COMPUTE.search(line):
            current.compute[m.group(1)] = max(
                current.compute.get(m.group(1), 0.0), float(m.group(2))
            )
    report.allocation_failures = _refine(failures)
    return report
