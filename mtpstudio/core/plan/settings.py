"""Each Plan setting a user sets, declared once: bounds, step, CLI option and wording.

Without pydantic, like ``plan.choices``: registering the CLI's options costs no import of the
Plan model. The Plan's field carries its declaration (``ctx: Annotated[int, setting(
"runtime.ctx")]``) and validates with it; the CLI's options and the GUI's ranges and steps read
the same declaration, so a bound, a step or an option name is written here only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Literal

from mtpstudio.core.plan.choices import (
    CacheType,
    DesktopReclaim,
    FlashAttention,
    LoadMode,
    ShortVram,
    SplitMode,
)

Number = int | float
Kind = Literal["int", "float", "tokens", "path", "choice", "switch", "text"]

CTX_STEP = 256
"""The engine pads the context to 256 cells: the context's step everywhere."""
MIN_CTX = CTX_STEP
MAX_CTX = 4 * 1024 * 1024
MAX_DRAFT_TOKENS = 16
MAX_SLOTS = 256
MAX_THREADS = 100_000  # far above any machine; the engine still holds it in an int
MAX_LAYERS = 4096
MAX_MARGIN_MIB = 1024 * 1024
MARGIN_STEP_MIB = 64
MAX_PORT = 65535


@dataclass(frozen=True)
class Setting:
    """What the user may set in one Plan field, and how each face offers it.

    Attributes:
        path: the field's dotted path in the Plan (``runtime.ctx``).
        kind: how its value is read: ``int``/``float`` (argparse's type), ``tokens`` (an int
            read like ``128k`` or ``1e6``), ``path``, ``choice`` (``choices``' values),
            ``switch`` (``--x``/``--no-x``: on, off, or auto when not given) or ``text``.
        low: the smallest value the Plan accepts (None: no lower bound).
        high: the largest value the Plan accepts (None: no upper bound).
        step: one step of a spin box or a slider.
        name: how a sentence names the setting (``draft max``).
        unit: what follows the upper bound in the sentence (`` MiB (1 TiB)``).
        below: the sentence for a value below ``low``, when not the 'between' one.
        above: the sentence for a value above ``high``, when not the 'between' one.
        bounded_by: another setting that bounds this one from above: the Plan's cross-field
            rule says so, so ``high`` is what a control offers, not checked here.
        slider_high: the top of a slider where the whole range is too wide to drag.
        cli: the CLI's option strings, the first one long (none: the CLI has no option).
        cli_help: the CLI's help line.
        metavar: the CLI's placeholder.
        choices: the enumeration a ``choice`` setting takes.
    """

    path: str
    kind: Kind = "int"
    low: Number | None = None
    high: Number | None = None
    step: Number = 1
    name: str = ""
    unit: str = ""
    below: str | None = None
    above: str | None = None
    bounded_by: str | None = None
    slider_high: Number | None = None
    cli: tuple[str, ...] = ()
    cli_help: str = ""
    metavar: str | None = None
    choices: type[StrEnum] | None = None

    def check(self, value: Any) -> Any:
        """``value`` when within the bounds (None passes: the field's type says whether it may
        be None); else ValueError with the one sentence every face shows."""
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            return value
        bounds = {"low": _number(self.low), "high": _number(self.high)}
        between = f"{self.name} must be between {{low}} and {{high}}{self.unit}"
        if self.low is not None and value < self.low:
            raise ValueError((self.below or between).format(**bounds))
        if self.high is not None and self.bounded_by is None and value > self.high:
            raise ValueError((self.above or between).format(**bounds))
        return value

    def whole_range(self) -> tuple[int, int, int]:
        """(low, high, step) as whole numbers: what a counting control offers."""
        if self.low is None or self.high is None:
            raise ValueError(f"{self.path} declares no range")
        return int(self.low), int(self.high), int(self.step)

    @property
    def dest(self) -> str:
        """The argparse destination of the CLI option (``--draft-max`` -> ``draft_max``)."""
        return self.cli[0].removeprefix("--").replace("-", "_")


def _number(value: Number | None) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _choice(path: str, flags: tuple[str, ...], enum: type[StrEnum], help_: str) -> Setting:
    return Setting(path, "choice", cli=flags, cli_help=help_, choices=enum)


_DECLARED = (
    Setting(
        "runtime.ctx",
        "tokens",
        low=MIN_CTX,
        high=MAX_CTX,
        step=CTX_STEP,
        below="ctx must be at least {low}",
        above="ctx must be at most {high}",
        cli=("--ctx", "-c"),
        cli_help="context size in tokens (32768, 128k, 1e6)",
    ),
    _choice("runtime.cache_type_k", ("--cache-type-k", "-ctk"), CacheType, "K cache type"),
    _choice("runtime.cache_type_v", ("--cache-type-v", "-ctv"), CacheType, "V cache type"),
    _choice("runtime.flash_attn", ("--flash-attn", "-fa"), FlashAttention, "flash attention"),
    Setting(
        "runtime.batch",
        low=1,
        high=MAX_CTX,
        step=256,
        name="batch sizes",
        cli=("--batch", "-b"),
        cli_help="logical batch size",
    ),
    Setting(
        "runtime.ubatch",
        low=1,
        high=MAX_CTX,
        step=128,
        name="batch sizes",
        cli=("--ubatch", "-ub"),
        cli_help="physical batch size",
    ),
    Setting(
        "runtime.parallel",
        low=1,
        high=MAX_SLOTS,
        name="parallel (slots)",
        cli=("--parallel", "-np"),
        cli_help="server slots (default 1)",
    ),
    Setting(
        "runtime.threads",
        low=1,
        high=MAX_THREADS,
        name="threads",
        cli=("--threads", "-t"),
        cli_help="CPU threads",
    ),
    Setting(
        "runtime.n_cpu_moe",
        low=0,
        high=MAX_LAYERS,
        name="n_cpu_moe",
        cli=("--n-cpu-moe", "-ncmoe"),
        cli_help="expert tensors of layers 0..N-1 on CPU",
    ),
    Setting(
        "runtime.moe_cache_mib",
        low=0,
        high=MAX_MARGIN_MIB,
        step=MARGIN_STEP_MIB,
        name="MoE cache",
        unit=" MiB (1 TiB)",
        slider_high=8192,
        cli=("--moe-cache-mib",),
        cli_help="GPU cache (MiB) for the experts kept in RAM (upstream b11549 on; 0: off)",
    ),
    Setting(  # the CLI's --fit-margin also takes one value per device: its own option
        "runtime.fit_margin_mib",
        low=0,
        high=MAX_MARGIN_MIB,
        step=MARGIN_STEP_MIB,
        name="fit margin",
        unit=" MiB (1 TiB)",
        slider_high=4096,
    ),
    Setting(
        "runtime.n_gpu_layers",
        low=0,
        high=MAX_LAYERS,
        name="gpu layers",
        cli=("--n-gpu-layers", "-ngl"),
        cli_help="layers on the GPU",
    ),
    _choice("runtime.load_mode", ("--load-mode",), LoadMode, "mmap, no-mmap, mlock"),
    Setting(
        "mtp.enabled",
        "switch",
        cli=("--mtp", "-mtp"),
        cli_help="MTP drafting (default auto: on when the model has an MTP layer and the build "
        "can run it)",
    ),
    # the engines' own spellings are accepted too (upstream --spec-draft-*, ik --draft-*)
    Setting(
        "mtp.draft_max",
        low=1,
        high=MAX_DRAFT_TOKENS,
        name="draft max",
        cli=("--draft-max", "--spec-draft-n-max"),
        cli_help="most drafted tokens per step",
    ),
    Setting(
        "mtp.draft_min",
        low=0,
        high=MAX_DRAFT_TOKENS,
        below="draft min must not be negative",
        bounded_by="mtp.draft_max",
        cli=("--draft-min", "--spec-draft-n-min"),
        cli_help="fewest drafted tokens per step",
    ),
    Setting(
        "mtp.draft_p_min",
        "float",
        low=0.0,
        high=1.0,
        step=0.05,
        name="draft p-min",
        cli=("--draft-p-min", "--spec-draft-p-min"),
        cli_help="draft probability threshold",
    ),
    _choice(
        "mtp.cache_type_k",
        ("--draft-cache-type-k", "--spec-draft-type-k", "-ctkd"),
        CacheType,
        "draft K cache type",
    ),
    _choice(
        "mtp.cache_type_v",
        ("--draft-cache-type-v", "--spec-draft-type-v", "-ctvd"),
        CacheType,
        "draft V cache type",
    ),
    Setting(
        "draft.path",
        "path",
        cli=("--draft-model",),
        cli_help="a separate draft model (turns MTP off)",
        metavar="GGUF",
    ),
    Setting(
        "draft.gpu_layers",
        low=0,
        high=MAX_LAYERS,
        name="draft gpu layers",
        cli=("--draft-gpu-layers", "-ngld"),
        cli_help="draft model layers on the GPU",
    ),
    Setting(
        "host.cpu",
        "text",
        name="CPU",
        cli=("--cpu",),
        cli_help="plan for another PC's CPU: a catalogue CPU id (default: this computer's)",
        metavar="CPU",
    ),
    Setting(
        "host.ram",
        "text",
        name="RAM",
        cli=("--ram",),
        cli_help="that PC's RAM: ddr5-6000x2, ddr4-3200x2 (type-MT/s x channels) or a read "
        "bandwidth such as 65GB/s (default: what the CPU's owners commonly run)",
        metavar="SPEC",
    ),
    Setting(
        "mtp.acceptance",
        "float",
        low=0.0,
        high=1.0,
        step=0.01,
        name="acceptance",
        cli=("--acceptance",),
        cli_help="the share of drafted tokens accepted (accepted / drafted) the speed estimate "
        "assumes (default: this model's last benchmark on this engine, else a published figure)",
        metavar="A",
    ),
    Setting("server.host", "text", cli=("--host",), cli_help="listen address (default 127.0.0.1)"),
    Setting(
        "server.port",
        low=1,
        high=MAX_PORT,
        name="port",
        cli=("--port",),
        cli_help="TCP port (default 8080)",
    ),
    Setting(
        "server.api_key_file",
        "path",
        cli=("--api-key-file",),
        cli_help="the API key file the plan names (default beyond loopback: "
        "~/.config/mtpstudio/server-api-key, generated when missing)",
        metavar="FILE",
    ),
    _choice("desktop", ("--desktop",), DesktopReclaim, "desktop VRAM reclamation"),
    _choice("split.mode", ("--split-mode", "-sm"), SplitMode, "layer or row split"),
    _choice(
        "outputs.short_vram",
        ("--short-vram",),
        ShortVram,
        "what the service's check before the engine starts does when a GPU has too little "
        "free memory for the plan (default refuse)",
    ),
)

SETTINGS: Mapping[str, Setting] = MappingProxyType({s.path: s for s in _DECLARED})
"""Every declared setting by dotted path, in the order the CLI's help lists them."""


def setting(path: str) -> Setting:
    """The declaration of the Plan setting at ``path`` (``runtime.ctx``); KeyError if none."""
    return SETTINGS[path]


def native_context(native: int) -> int | None:
    """The model's native context when it names a usable one (at least ``MIN_CTX``), else
    None: the one rule for where a context stops following the model (a default context is
    clamped to it; the Fit lever and the context slider stop at it)."""
    return native if native >= MIN_CTX else None


def within_native(ctx: int, native: int) -> int:
    """``ctx``, but at most the model's usable native context (a 32,768 default on a model
    trained for 4,096 becomes 4,096: beyond it the model was never trained)."""
    top = native_context(native)
    return ctx if top is None else min(ctx, top)
