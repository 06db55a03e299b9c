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
    EngineFlavour,
    FlashAttention,
    LoadMode,
    MoePlacement,
    ShortVram,
    SplitMode,
)

Number = int | float
Kind = Literal["int", "float", "tokens", "path", "choice", "switch", "text", "own"]

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
            ``switch`` (``--x``/``--no-x``: on, off, or auto when not given), ``text``, or
            ``own``: a value the CLI reads with its own option (several values, or one option
            for several fields: ``--gpu``, ``--engine``) or not at all.
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
        default: the Plan's default (``()`` for a list: an empty one).
        tooltip: the sentence that explains it: the Plan field's description, the window's
            tooltip.
        label: its name on a form (``Context``); empty where no form shows it.
        labels: the words a control shows for its values, (value, words) in the order
            offered; a value left out is shown as itself.
        none_label: what a control shows for None, when None is a choice (``all``).
        engine: the engine options (``engines.flags.Option`` values) it becomes on the command
            line; empty when it changes no flag.
        form: the Engine page's group that shows a control for it (``context``, ``server``,
            ``drafting``, ``placement``); empty where that page shows none. A setting the page
            does not place itself gets the control of its kind there.
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
    default: Any = None
    tooltip: str = ""
    label: str = ""
    labels: tuple[tuple[Any, str], ...] = ()
    none_label: str | None = None
    engine: tuple[str, ...] = ()
    form: str = ""

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
        label="Context",
        engine=("ctx",),
        form="context",
        default=32768,
        tooltip="Context size in tokens (-c).",
    ),
    Setting(
        "runtime.cache_type_k",
        "choice",
        cli=("--cache-type-k", "-ctk"),
        cli_help="K cache type",
        choices=CacheType,
        label="K cache",
        engine=("cache-type-k",),
        form="context",
        default=CacheType.Q8_0,
        tooltip="K cache type (-ctk).",
    ),
    Setting(
        "runtime.cache_type_v",
        "choice",
        cli=("--cache-type-v", "-ctv"),
        cli_help="V cache type",
        choices=CacheType,
        label="V cache",
        engine=("cache-type-v",),
        form="context",
        default=CacheType.Q8_0,
        tooltip="V cache type (-ctv).",
    ),
    Setting(
        "runtime.flash_attn",
        "choice",
        cli=("--flash-attn", "-fa"),
        cli_help="flash attention",
        choices=FlashAttention,
        label="Flash attention",
        engine=("flash-attn",),
        form="context",
        default=FlashAttention.ON,
        tooltip="Flash attention (-fa); quantized V needs it.",
    ),
    Setting(
        "runtime.batch",
        low=1,
        high=MAX_CTX,
        step=256,
        name="batch sizes",
        cli=("--batch", "-b"),
        cli_help="logical batch size",
        label="Batch",
        engine=("batch",),
        form="context",
        default=2048,
        tooltip="Logical batch size (-b).",
    ),
    Setting(
        "runtime.ubatch",
        low=1,
        high=MAX_CTX,
        step=128,
        name="batch sizes",
        cli=("--ubatch", "-ub"),
        cli_help="physical batch size",
        label="Ubatch",
        engine=("ubatch",),
        form="context",
        default=512,
        tooltip="Physical batch size (-ub); drives compute buffers.",
    ),
    Setting(
        "runtime.parallel",
        low=1,
        high=MAX_SLOTS,
        name="parallel (slots)",
        cli=("--parallel", "-np"),
        cli_help="server slots (default 1)",
        label="Slots",
        engine=("parallel",),
        form="placement",
        default=1,
        tooltip="Server slots (-np); more slots multiply the recurrent state.",
    ),
    Setting(
        "runtime.threads",
        low=1,
        high=MAX_THREADS,
        name="threads",
        cli=("--threads", "-t"),
        cli_help="CPU threads",
        label="Threads",
        none_label="engine default",
        engine=("threads",),
        form="placement",
        default=None,
        tooltip="CPU threads (-t); none lets the engine choose.",
    ),
    Setting(
        "runtime.n_cpu_moe",
        low=0,
        high=MAX_LAYERS,
        name="n_cpu_moe",
        cli=("--n-cpu-moe", "-ncmoe"),
        cli_help="expert tensors of layers 0..N-1 on CPU",
        label="CPU expert layers",
        engine=("n-cpu-moe",),
        form="placement",
        default=0,
        tooltip="Layers 0..N-1 keep their expert tensors on the CPU (--n-cpu-moe).",
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
        label="MoE cache",
        engine=("moe-cache-mib",),
        form="placement",
        default=0,
        tooltip=(
            "GPU cache for the experts of the layers whose experts stay in RAM (MiB; "
            "--moe-cache-mib, upstream b11549 on); 0: off."
        ),
    ),
    Setting(
        "runtime.fit_margin_mib",  # the CLI: --fit-margin with one value (split.fit_margins_mib)
        low=0,
        high=MAX_MARGIN_MIB,
        step=MARGIN_STEP_MIB,
        name="fit margin",
        unit=" MiB (1 TiB)",
        slider_high=4096,
        label="Margin",
        engine=("fit-target", "fit-margin"),
        form="placement",
        default=1024,
        tooltip="VRAM left free by the fit (MiB; --fit-target / --fit-margin).",
    ),
    Setting(
        "runtime.n_gpu_layers",
        low=0,
        high=MAX_LAYERS,
        name="gpu layers",
        cli=("--n-gpu-layers", "-ngl"),
        cli_help="layers on the GPU",
        label="GPU layers",
        none_label="all",
        engine=("gpu-layers",),
        form="placement",
        default=None,
        tooltip="Layers on the GPU (-ngl); none means all (or fit's choice).",
    ),
    Setting(
        "runtime.load_mode",
        "choice",
        cli=("--load-mode",),
        cli_help="mmap, no-mmap, mlock",
        choices=LoadMode,
        label="Weights",
        labels=(
            (LoadMode.MMAP, "memory-mapped (default)"),
            (LoadMode.NO_MMAP, "read into RAM (no mmap)"),
            (LoadMode.MLOCK, "locked in RAM (mlock)"),
        ),
        engine=("load-mode", "mlock", "no-mmap"),
        form="placement",
        default=LoadMode.MMAP,
        tooltip="Weights memory-mapped, read in, or locked in RAM.",
    ),
    Setting(
        "mtp.enabled",
        "switch",
        cli=("--mtp", "-mtp"),
        cli_help=(
            "MTP drafting (default auto: on when the model has an MTP layer and the build can "
            "run it)"
        ),
        label="MTP",
        labels=((None, "auto"), (True, "on"), (False, "off")),
        engine=("spec-type", "mtp"),
        form="drafting",
        default=None,
        tooltip=(
            "Draft tokens with the model's MTP layer: true (on), false (off) or null (auto: on "
            "when the model has an MTP layer and the chosen build can run it)."
        ),
    ),
    Setting(
        "mtp.draft_max",
        low=1,
        high=MAX_DRAFT_TOKENS,
        name="draft max",
        cli=("--draft-max", "--spec-draft-n-max"),
        cli_help="most drafted tokens per step",
        label="Draft depth (max)",
        engine=("draft-max",),
        form="drafting",
        default=2,
        tooltip="Most tokens drafted per step (--spec-draft-n-max / --draft-max).",
    ),
    Setting(
        "mtp.draft_min",
        low=0,
        high=MAX_DRAFT_TOKENS,
        below="draft min must not be negative",
        bounded_by="mtp.draft_max",
        cli=("--draft-min", "--spec-draft-n-min"),
        cli_help="fewest drafted tokens per step",
        label="Draft min",
        engine=("draft-min",),
        form="drafting",
        default=0,
        tooltip="Fewest tokens drafted per step.",
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
        label="p-min",
        engine=("draft-p-min",),
        form="drafting",
        default=0.75,
        tooltip="Stop drafting when the draft's probability falls below this.",
    ),
    Setting(
        "mtp.cache_type_k",
        "choice",
        cli=("--draft-cache-type-k", "--spec-draft-type-k", "-ctkd"),
        cli_help="draft K cache type",
        choices=CacheType,
        label="Draft K cache",
        engine=("draft-cache-type-k",),
        form="drafting",
        default=CacheType.F16,
        tooltip="K cache type of the draft context.",
    ),
    Setting(
        "mtp.cache_type_v",
        "choice",
        cli=("--draft-cache-type-v", "--spec-draft-type-v", "-ctvd"),
        cli_help="draft V cache type",
        choices=CacheType,
        label="Draft V cache",
        engine=("draft-cache-type-v",),
        form="drafting",
        default=CacheType.F16,
        tooltip="V cache type of the draft context.",
    ),
    Setting(
        "draft.path",
        "path",
        cli=("--draft-model",),
        cli_help="a separate draft model (turns MTP off)",
        metavar="GGUF",
        label="Draft model",
        engine=("draft-model",),
        default=None,
        tooltip="Draft GGUF sharing the model's vocabulary; none means no draft model.",
    ),
    Setting(
        "draft.gpu_layers",
        low=0,
        high=MAX_LAYERS,
        name="draft gpu layers",
        cli=("--draft-gpu-layers", "-ngld"),
        cli_help="draft model layers on the GPU",
        label="Draft GPU layers",
        none_label="all",
        engine=("draft-gpu-layers",),
        form="drafting",
        default=None,
        tooltip="Draft layers on the GPU (-ngld); none means all of them on a GPU plan.",
    ),
    Setting(
        "host.cpu",
        "text",
        name="CPU",
        cli=("--cpu",),
        cli_help="plan for another PC's CPU: a catalogue CPU id (default: this computer's)",
        metavar="CPU",
        label="CPU",
        default=None,
        tooltip="A catalogue CPU id (null: this computer's CPU, as probed).",
    ),
    Setting(
        "host.ram",
        "text",
        name="RAM",
        cli=("--ram",),
        cli_help=(
            "that PC's RAM: ddr5-6000x2, ddr4-3200x2 (type-MT/s x channels) or a read bandwidth "
            "such as 65GB/s (default: what the CPU's owners commonly run)"
        ),
        metavar="SPEC",
        label="RAM",
        default=None,
        tooltip=(
            "That PC's RAM: ddr5-6000x2 (type-MT/s x channels) or a read bandwidth such as "
            "65GB/s (null: the CPU's commonly run RAM, or this computer's)."
        ),
    ),
    Setting(
        "mtp.acceptance",
        "float",
        low=0.0,
        high=1.0,
        step=0.01,
        name="acceptance",
        cli=("--acceptance",),
        cli_help=(
            "the share of drafted tokens accepted (accepted / drafted) the speed estimate "
            "assumes (default: this model's last benchmark on this engine, else a published "
            "figure)"
        ),
        metavar="A",
        label="Acceptance (estimate)",
        none_label="measured or published",
        form="drafting",
        default=None,
        tooltip=(
            "The share of drafted tokens accepted the speed estimate assumes (null: this "
            "model's last benchmark on this engine, else a published figure). Changes no flag."
        ),
    ),
    Setting(
        "server.host",
        "text",
        cli=("--host",),
        cli_help="listen address (default 127.0.0.1)",
        label="Host",
        engine=("host",),
        form="server",
        default="127.0.0.1",
        tooltip="Listen address; loopback by default.",
    ),
    Setting(
        "server.port",
        low=1,
        high=MAX_PORT,
        name="port",
        cli=("--port",),
        cli_help="TCP port (default 8080)",
        label="Port",
        engine=("port",),
        form="server",
        default=8080,
        tooltip="TCP port.",
    ),
    Setting(
        "server.api_key_file",
        "path",
        cli=("--api-key-file",),
        cli_help=(
            "the API key file the plan names (default beyond loopback: "
            "~/.config/mtpstudio/server-api-key, generated when missing)"
        ),
        metavar="FILE",
        label="API key file",
        engine=("api-key-file",),
        form="server",
        default=None,
        tooltip=(
            "File holding the API key (user-only, 0600); the key itself is never stored in the "
            "plan. Required when listening beyond loopback."
        ),
    ),
    Setting(
        "desktop",
        "choice",
        cli=("--desktop",),
        cli_help="desktop VRAM reclamation",
        choices=DesktopReclaim,
        label="Desktop",
        default=DesktopReclaim.NONE,
        tooltip="How desktop VRAM is reclaimed.",
    ),
    Setting(
        "split.mode",
        "choice",
        cli=("--split-mode", "-sm"),
        cli_help="layer or row split",
        choices=SplitMode,
        label="Split",
        engine=("split-mode",),
        default=SplitMode.LAYER,
        tooltip=(
            "-sm: 'layer' deals whole layers to the devices; 'row' splits each weight matrix by "
            "rows over CUDA cards (RPC devices cannot)."
        ),
    ),
    Setting(
        "outputs.short_vram",
        "choice",
        cli=("--short-vram",),
        cli_help=(
            "what the service's check before the engine starts does when a GPU has too little "
            "free memory for the plan (default refuse)"
        ),
        choices=ShortVram,
        label="When VRAM is short",
        default=ShortVram.REFUSE,
        tooltip=(
            "What the service's check before the engine starts does when a GPU has less free "
            "memory than the plan needs then."
        ),
    ),
    Setting(
        "schema_version",
        "own",
        default=2,
        tooltip="Version of this file's layout.",
    ),
    Setting(
        "device",
        "own",
        cli=("--gpu",),
        cli_help=(
            "auto, cpu, a device id (CUDA0) or a catalogue GPU id; repeat it to split the "
            "model over several GPUs (plan --demo --gpu rtx-4070-super --gpu rtx-3060-12gb); "
            "`--gpu list` lists the catalogue by vendor"
        ),
        metavar="GPU",
        label="Device",
        engine=("device",),
        default="auto",
        tooltip=(
            "'auto' (the detected GPU with most VRAM), 'cpu', a detected device id such as "
            "'CUDA0', or a catalogue GPU id such as 'rtx-4070-super'."
        ),
    ),
    Setting(
        "model.path",
        "own",
        cli=("--model", "-m"),
        cli_help="GGUF file (first part of a split model)",
        label="Model",
        engine=("model",),
        default=None,
        tooltip="GGUF file (the first part of a split model).",
    ),
    Setting(
        "model.card",
        "own",
        cli=("--demo",),
        metavar="CARD",
        label="Demo model",
        default="qwen3.6-35b-a3b-iq4_xs",
        tooltip="Demo model card id, used when no path is given.",
    ),
    Setting(
        "engine.flavour",
        "own",
        cli=("--engine",),
        cli_help="upstream, ik, or the path of a llama-server binary",
        label="Engine",
        default=EngineFlavour.UPSTREAM,
        tooltip="upstream llama.cpp or the ik_llama.cpp fork; they spell flags differently.",
    ),
    Setting(
        "engine.binary",  # the CLI: --engine with a path (engine.flavour)
        "own",
        label="Engine binary",
        default=None,
        tooltip="Path of the llama-server binary; none means found by detection.",
    ),
    Setting(
        "runtime.moe",
        "own",
        cli=("--fit", "--cpu-moe", "-cmoe"),
        choices=MoePlacement,
        label="Experts",
        labels=(
            (MoePlacement.N_CPU_MOE, "first N layers on the CPU"),
            (MoePlacement.FIT, "the engine's fit decides"),
            (MoePlacement.ALL_CPU, "all on the CPU"),
            (MoePlacement.GPU, "all on the GPU"),
        ),
        engine=("fit", "cpu-moe", "override-tensor"),
        form="placement",
        default=MoePlacement.FIT,
        tooltip="Expert placement: engine fit, N layers on CPU, all on CPU, or all on GPU.",
    ),
    Setting(
        "runtime.op_offload",
        "own",
        label="Op offload",
        engine=("no-op-offload",),
        default=True,
        tooltip=(
            "Offload host-tensor work to the GPU (upstream's default): with experts in system "
            "RAM, prompt batches of 32+ tokens copy one layer's experts at a time to the GPU "
            "and run them there. Much faster prompt processing, but the GPU compute buffer "
            "grows by about one layer's expert tensors. Off (--no-op-offload) saves that VRAM "
            "and runs the RAM experts on the CPU, so long prompts are processed several times "
            "slower."
        ),
    ),
    Setting(
        "outputs.export_dir",
        "own",
        label="Export folder",
        default=None,
        tooltip="Folder for exported files; none means the XDG data dir.",
    ),
    Setting(
        "outputs.service_name",
        "own",
        label="Service name",
        default="mtpstudio-llama",
        tooltip="systemd unit name, without .service.",
    ),
    Setting(
        "outputs.env_file",
        "own",
        label="Environment file",
        default="mtpstudio-llama.env",
        tooltip="EnvironmentFile name.",
    ),
    Setting(
        "outputs.launch_script",
        "own",
        label="Launch script",
        default="mtpstudio-llama.sh",
        tooltip="Launch script name.",
    ),
    Setting(
        "split.gpus",
        "own",  # the CLI: the device's --gpu, repeated
        label="Further GPUs",
        engine=("device",),
        default=(),
        tooltip=(
            "Further local GPUs beside 'device' (detected ids such as 'CUDA1', or catalogue GPU "
            "ids), in the engine's order."
        ),
    ),
    Setting(
        "split.rpc",
        "own",
        cli=("--rpc",),
        cli_help=(
            "a machine running llama.cpp's rpc-server, as one more device (repeatable); it is "
            "probed for its memory now, or planned with =MIB without reaching it"
        ),
        metavar="HOST:PORT[=MIB]",
        label="RPC servers",
        engine=("rpc",),
        default=(),
        tooltip="rpc-server endpoints on other machines (--rpc); the engine puts them first.",
    ),
    Setting(
        "split.tensor_split",
        "own",
        cli=("--tensor-split", "-ts"),
        cli_help="layers (or shares) per device in the engine's order: RPC endpoints, then GPUs",
        metavar="N,N,...",
        label="Tensor split",
        engine=("tensor-split",),
        default=None,
        tooltip=(
            "-ts: layers (or shares) per device in the engine's order (RPC servers, then local "
            "GPUs); none lets the engine's fit, or the devices' free memory, decide."
        ),
    ),
    Setting(
        "split.fit_margins_mib",
        "own",
        cli=("--fit-margin", "--fit-target"),
        cli_help=(
            "VRAM the fit leaves free (upstream spells it --fit-target, ik --fit-margin); one "
            "value per device for a split plan"
        ),
        metavar="MIB[,MIB...]",
        label="Fit margin per device",
        engine=("fit-target", "fit-margin"),
        default=None,
        tooltip=(
            "--fit-target per device in the engine's order (MiB); none: the fit margin for "
            "every device."
        ),
    ),
)

SETTINGS: Mapping[str, Setting] = MappingProxyType({s.path: s for s in _DECLARED})
"""Every declared setting by dotted path, in the order the CLI's help lists them."""


def label_of(path: str) -> str:
    """The setting's name on a form (its dotted path where it declares none)."""
    return SETTINGS[path].label or path


def value_choices(path: str) -> tuple[tuple[Any, str], ...]:
    """(value, words) for each value a control offers for the setting at ``path``: its
    declared ``labels`` in their order, then every other member of its enumeration as itself."""
    declared = SETTINGS[path]
    listed = {value for value, _ in declared.labels}
    rest = [(m, m.value) for m in declared.choices or () if m not in listed]
    return (*declared.labels, *rest)


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
