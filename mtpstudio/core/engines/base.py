"""Plan + probed EngineBuild -> LaunchSpec (argv, env, a one-line note per flag, warnings).

Adapters are pure: they read the Plan, the build's probed facts and optionally the model's
header facts, and never touch the file system or run anything. Every flag they emit is one
the build accepted when probed (``EngineBuild.accepts``); when the preferred spelling was
rejected but an older or alternative spelling was accepted, that one is used and its note
says so. An option that cannot be expressed for the build raises ``AdapterError`` naming the
option and the build; something that works but deserves attention becomes a warning.

Unprobed builds (empty ``accepted_flags``) are refused, unless the caller asks for
``assume_documented=True`` (catalogue/demo planning without a binary): then the flags of the
engine snapshot documented in ``shared/reference/engines.md`` §3 stand in for the probe and
the spec carries a warning saying so.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from mtpstudio.core.engines.caps import Backend, EngineBuild, MtpSupport
from mtpstudio.core.engines.flags import FlagSpelling, Option
from mtpstudio.core.errors import AdapterError
from mtpstudio.core.memory.engine_facts import memory_facts
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan import CacheType, EngineFlavour, FlashAttention, MoePlacement, Plan

__all__ = [
    "DEFAULT_BINARY",
    "ENV_PREFIXES_TO_DROP",
    "QUANTIZED_CACHE_TYPES",
    "AdapterBase",
    "EngineAdapter",
    "FlagNote",
    "FlagSpelling",
    "LaunchSpec",
    "Option",
    "SpecBuilder",
    "describe_build",
    "format_float",
]

DEFAULT_BINARY = Path("/usr/local/bin/llama-server")
"""Stand-in binary for documented (unprobed) planning when the plan names none."""

ENV_PREFIXES_TO_DROP = ("LLAMA_ARG_", "LLAMA_API_KEY")
"""Upstream applies ``LLAMA_ARG_*`` (and ``LLAMA_API_KEY``) before argv; launches drop them."""

QUANTIZED_CACHE_TYPES = frozenset(
    {CacheType.Q8_0, CacheType.Q5_1, CacheType.Q5_0, CacheType.Q4_1, CacheType.Q4_0,
     CacheType.IQ4_NL}
)  # fmt: skip


@dataclass(frozen=True)
class FlagNote:
    """One emitted flag: its spelling, its values, the Plan setting it comes from, and why."""

    flag: str
    values: tuple[str, ...]
    setting: str
    explanation: str

    @property
    def words(self) -> tuple[str, ...]:
        return (self.flag, *self.values)


@dataclass(frozen=True)
class LaunchSpec:
    """How to start one ``llama-server``: the command, its environment, and what it means.

    ``argv`` is derived from ``flags`` (binary first, then each flag and its values in
    order), so every argument has a one-line explanation. ``env`` holds variables to set;
    ``drop_env_prefixes`` names variables a launcher must remove from the inherited
    environment (upstream reads ``LLAMA_ARG_*`` before the command line).
    """

    flavour: EngineFlavour
    binary: Path
    flags: tuple[FlagNote, ...]
    warnings: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    drop_env_prefixes: tuple[str, ...] = ENV_PREFIXES_TO_DROP
    api_key_file: Path | None = None
    assumed_documented: bool = False
    blockers: tuple[str, ...] = ()
    """Why the engine will not run this plan as planned (empty: it will)."""
    alternatives: tuple[str, ...] = ()
    """What works instead, when there are blockers."""

    @property
    def argv(self) -> tuple[str, ...]:
        """The full command: binary path, then every flag with its values."""
        return (str(self.binary), *self.args)

    @property
    def args(self) -> tuple[str, ...]:
        return tuple(word for note in self.flags for word in note.words)

    @property
    def arg_groups(self) -> tuple[int, ...]:
        """Word count of each flag with its values (for one flag per line layouts)."""
        return tuple(len(note.words) for note in self.flags)

    def command_line(self) -> str:
        """The command as one bash-quoted line (for display and copy-paste)."""
        return shlex.join(self.argv)

    def note_for(self, flag: str) -> FlagNote | None:
        """The note of the first emitted flag spelled ``flag``, if any."""
        return next((n for n in self.flags if n.flag == flag), None)

    def with_binary(self, binary: Path) -> LaunchSpec:
        """The same spec for another path of the same build (e.g. an installed copy)."""
        return dataclasses.replace(self, binary=binary)


class EngineAdapter(Protocol):
    """Turns a Plan into a LaunchSpec for builds of one flavour."""

    @property
    def flavour(self) -> EngineFlavour: ...

    @property
    def engine_name(self) -> str: ...

    @property
    def spellings(self) -> Mapping[Option, FlagSpelling]: ...

    @property
    def documented_flags(self) -> frozenset[str]: ...

    @property
    def documented_spec_types(self) -> tuple[str, ...]: ...

    @property
    def documented_mtp(self) -> MtpSupport: ...

    def probe_candidates(self) -> tuple[tuple[str, str | None], ...]: ...

    def build_mtp_blocker(self, build: EngineBuild) -> str | None: ...

    def mtp_blocker(self, build: EngineBuild, model: ModelInfo | None) -> str | None: ...

    def resolve_mtp(self, plan: Plan, build: EngineBuild, model: ModelInfo | None) -> Plan: ...

    def build_launch_spec(
        self,
        plan: Plan,
        build: EngineBuild,
        model: ModelInfo | None = None,
        *,
        for_mtpstudio_launch: bool = False,
        api_key_file: Path | None = None,
        model_path: Path | None = None,
        assume_documented: bool = False,
    ) -> LaunchSpec: ...


def describe_build(build: EngineBuild) -> str:
    """A short name for a build in messages, e.g. 'upstream llama-server 0.6.0-dev at /x'."""
    name = "upstream llama.cpp" if build.flavour is EngineFlavour.UPSTREAM else "ik_llama.cpp"
    return f"the {name} build {build.version} at {build.binary}"


def format_float(value: float) -> str:
    """A probability for the command line: at most 6 decimals, no trailing zeros."""
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text or "0"


class SpecBuilder:
    """Collects flags and warnings for one LaunchSpec, choosing each flag's spelling."""

    def __init__(self, spellings: Mapping[Option, FlagSpelling], build: EngineBuild) -> None:
        self._spellings = spellings
        self.build = build
        self.notes: list[FlagNote] = []
        self.warnings: list[str] = []
        self.blockers: list[str] = []
        self.alternatives: list[str] = []

    def spelling(self, option: Option) -> str | None:
        """The first spelling of ``option`` that the build accepts, or None."""
        entry = self._spellings.get(option)
        if entry is None:
            return None
        return next((s for s in entry.spellings if self.build.accepts(s)), None)

    def accepts(self, option: Option) -> bool:
        return self.spelling(option) is not None

    def preferred(self, option: Option) -> str:
        entry = self._spellings.get(option)
        return entry.spellings[0] if entry else option.value

    def emit(
        self,
        option: Option,
        values: Sequence[str],
        setting: str,
        explanation: str,
        *,
        required: bool = True,
        purpose: str | None = None,
    ) -> bool:
        """Append ``option`` with ``values``; False when not accepted and not required.

        Raises:
            AdapterError: when the build accepts no spelling of a required option.
        """
        flag = self.spelling(option)
        if flag is None:
            if required:
                raise self.unsupported(option, purpose or f"the plan's {setting}")
            return False
        preferred = self.preferred(option)
        if flag != preferred:
            explanation = f"{explanation} ({flag} is this build's spelling of {preferred}.)"
        self.notes.append(FlagNote(flag, tuple(values), setting, explanation))
        return True

    def unsupported(self, option: Option, purpose: str) -> AdapterError:
        entry = self._spellings.get(option)
        names = " / ".join(entry.spellings) if entry else option.value
        return AdapterError(
            f"{describe_build(self.build)} does not accept {names}, which is needed for {purpose}",
            hint="Change that setting in the plan, or choose a newer engine build.",
        )

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def block(self, message: str, instead: str) -> None:
        """The engine will not run the plan as planned: why, and what works instead."""
        if message not in self.blockers:
            self.blockers.append(message)
        if instead not in self.alternatives:
            self.alternatives.append(instead)


class AdapterBase:
    """The parts both flavours share; subclasses add placement, load mode, MTP, logging."""

    flavour: EngineFlavour
    spellings: Mapping[Option, FlagSpelling]
    documented_flags: frozenset[str]
    documented_spec_types: tuple[str, ...]
    documented_mtp: MtpSupport
    engine_name: str
    expert_tensors = r"ffn_(up|down|gate|gate_up)_exps"
    """The routed-expert tensor names as the engine's own --n-cpu-moe pattern writes them."""

    # -- the template -----------------------------------------------------------------------

    def build_launch_spec(
        self,
        plan: Plan,
        build: EngineBuild,
        model: ModelInfo | None = None,
        *,
        for_mtpstudio_launch: bool = False,
        api_key_file: Path | None = None,
        model_path: Path | None = None,
        assume_documented: bool = False,
    ) -> LaunchSpec:
        """The LaunchSpec for ``plan`` on ``build``.

        Args:
            plan: the configuration.
            build: the probed binary (``build.flavour`` must be this adapter's flavour).
            model: header facts of the model, when known; enables model-specific checks
                (MTP layers, experts, architecture).
            for_mtpstudio_launch: mtpstudio itself starts and watches the server, so ask for
                the log lines it parses (upstream ``-lv 4``).
            api_key_file: a file holding the API key (see ``engines.apikey``); preferred over
                ``plan.server.api_key`` because the key then stays out of argv and units.
            model_path: the GGUF to load, overriding ``plan.model.path``.
            assume_documented: plan for an unprobed build with the documented flag table.

        Raises:
            AdapterError: an option cannot be expressed for this build, or the plan lacks
                something the command needs (a model file, an API key off loopback).
        """
        if build.flavour is not self.flavour:
            raise AdapterError(
                f"{describe_build(build)} is not an {self.engine_name} build",
                hint="Use adapter_for(build) to pick the adapter.",
            )
        build, assumed = self._effective_build(build, assume_documented)
        b = SpecBuilder(self.spellings, build)
        if assumed:
            b.warn(
                f"Planned with the documented flags of {self.engine_name}, not a "
                "probed binary; probe the real build before launching."
            )
        if plan.engine.flavour is not build.flavour:
            raise AdapterError(
                f"the plan is for {plan.engine.flavour.value} but {describe_build(build)} is "
                f"{build.flavour.value}",
                hint="Choose a build of the plan's engine, or switch the plan's engine.",
            )
        if plan.engine.binary is not None and plan.engine.binary != build.binary:
            b.warn(
                f"The plan names the engine binary {plan.engine.binary}, but the command "
                f"uses the probed build at {build.binary}."
            )
        plan = self.resolve_mtp(plan, build, model)
        self._emit_model(plan, b, model_path, assumed)
        key_file = self._emit_server(plan, b, api_key_file or plan.server.api_key_file)
        self._emit_context(plan, b)
        self._emit_placement(plan, model, b)
        self._emit_load_mode(plan, b)
        self._emit_mtp(plan, model, b)
        self._emit_draft_model(plan, b)
        self._emit_logging(plan, b, for_mtpstudio_launch)
        return LaunchSpec(
            flavour=self.flavour,
            binary=build.binary,
            flags=tuple(b.notes),
            warnings=tuple(b.warnings),
            env={},
            api_key_file=key_file,
            assumed_documented=assumed,
            blockers=tuple(b.blockers),
            alternatives=tuple(b.alternatives),
        )

    # -- MTP: can it run, and what auto means ---------------------------------------------------

    def build_mtp_blocker(self, build: EngineBuild) -> str | None:
        """Why this build cannot draft with MTP at all (None: it can, or may)."""
        raise NotImplementedError

    def mtp_blocker(self, build: EngineBuild, model: ModelInfo | None) -> str | None:
        """Why MTP cannot run with this build and model (None: it can).

        With no model known, only the build is judged.
        """
        reason = self.build_mtp_blocker(build)
        if reason is not None or model is None:
            return reason
        if not model.has_mtp:
            return "the model has no MTP (nextn) layer"
        architectures = memory_facts(self.flavour).mtp_architectures
        if model.architecture not in architectures:
            return (
                f"{self.engine_name} runs MTP only for {', '.join(sorted(architectures))} "
                f"models, and this model is {model.architecture}"
            )
        return None

    def resolve_mtp(self, plan: Plan, build: EngineBuild, model: ModelInfo | None) -> Plan:
        """``plan`` with MTP auto (``enabled is None``) decided: on exactly when it can run."""
        if plan.mtp.enabled is not None:
            return plan
        if plan.draft.path is not None:  # a separate draft model drafts instead
            return plan.model_copy(update={"mtp": plan.mtp.model_copy(update={"enabled": False})})
        if not build.accepted_flags:  # unprobed: judge by the documented flags
            build, _ = self._effective_build(build, True)
        on = self.mtp_blocker(build, model) is None
        return plan.model_copy(update={"mtp": plan.mtp.model_copy(update={"enabled": on})})

    def _effective_build(
        self, build: EngineBuild, assume_documented: bool
    ) -> tuple[EngineBuild, bool]:
        if build.accepted_flags:
            return build, False
        if not assume_documented:
            raise AdapterError(
                f"{describe_build(build)} has not been probed, so mtpstudio does not know "
                "which flags it accepts",
                hint="Run engine detection first (it asks the binary about each flag).",
            )
        documented = dataclasses.replace(
            build,
            accepted_flags=self.documented_flags,
            spec_types=build.spec_types or self.documented_spec_types,
            mtp=self.documented_mtp,
            backends=build.backends if build.has_gpu_backend else (Backend.CUDA, Backend.CPU),
        )
        return documented, True

    # -- shared sections ----------------------------------------------------------------------

    def _emit_model(
        self, plan: Plan, b: SpecBuilder, model_path: Path | None, assumed: bool
    ) -> None:
        path = model_path or plan.model.path
        if path is None:
            if not assumed:
                raise AdapterError(
                    f"the plan uses the demo model card {plan.model.card}, which has no model "
                    "file to run",
                    hint="Choose the GGUF file to serve (the first part of a split model).",
                )
            path = Path("/path/to") / f"{plan.model.card}.gguf"
            b.warn(
                f"The plan uses the demo card {plan.model.card}: replace {path} with the real "
                "GGUF file before running this command."
            )
        b.emit(Option.MODEL, [str(path)], "model.path", "The model file (GGUF) to load.")

    def _emit_server(self, plan: Plan, b: SpecBuilder, api_key_file: Path | None) -> Path | None:
        server = plan.server
        if server.is_loopback:
            where = f"Listen on {server.host} only: reachable from this computer, not the network."
        else:
            where = (
                f"Listen on {server.host}: reachable from other machines, so clients need the "
                "API key."
            )
        b.emit(Option.HOST, [server.host], "server.host", where)
        b.emit(Option.PORT, [str(server.port)], "server.port", "TCP port of the HTTP API.")
        if api_key_file is not None:
            b.emit(
                Option.API_KEY_FILE,
                [str(api_key_file)],
                "server.api_key_file",
                "Clients must send the key stored in this file (Authorization: Bearer …); the "
                "key itself stays out of the command line.",
                purpose="reading the API key from a file",
            )
            return api_key_file
        if not server.is_loopback:
            raise AdapterError(
                f"listening on {server.host}, beyond this computer, needs an API key",
                hint="Name a key file (mtpstudio plan --api-key-file FILE; a new key is "
                "generated there with user-only permissions), or listen on 127.0.0.1.",
            )
        return None

    def _emit_context(self, plan: Plan, b: SpecBuilder) -> None:
        rt = plan.runtime
        b.emit(
            Option.CTX,
            [str(rt.ctx)],
            "runtime.ctx",
            f"Context window of {rt.ctx} tokens; the KV cache is sized for it.",
        )
        b.emit(
            Option.CACHE_K,
            [rt.cache_type_k.value],
            "runtime.cache_type_k",
            f"Store the attention K cache as {rt.cache_type_k.value}.",
        )
        b.emit(
            Option.CACHE_V,
            [rt.cache_type_v.value],
            "runtime.cache_type_v",
            f"Store the attention V cache as {rt.cache_type_v.value}.",
        )
        quantized_v = rt.cache_type_v in QUANTIZED_CACHE_TYPES
        if quantized_v and rt.flash_attn is FlashAttention.OFF:
            raise AdapterError(
                f"a quantized V cache ({rt.cache_type_v.value}) needs flash attention, but the "
                "plan turns it off",
                hint="Turn flash attention on or use an f16 V cache.",
            )
        b.emit(
            Option.FLASH_ATTN,
            [rt.flash_attn.value],
            "runtime.flash_attn",
            self._flash_attn_note(rt.flash_attn, quantized_v, b),
        )
        b.emit(
            Option.BATCH,
            [str(rt.batch)],
            "runtime.batch",
            f"Logical batch: up to {rt.batch} prompt tokens per decode call.",
        )
        b.emit(
            Option.UBATCH,
            [str(rt.ubatch)],
            "runtime.ubatch",
            f"Physical batch of {rt.ubatch} tokens; larger values grow the compute buffer.",
        )
        slots = "One server slot" if rt.parallel == 1 else f"{rt.parallel} server slots"
        b.emit(
            Option.PARALLEL,
            [str(rt.parallel)],
            "runtime.parallel",
            f"{slots}: each slot has its own recurrent state (and MTP multiplies it).",
        )
        if rt.threads is not None:
            b.emit(
                Option.THREADS,
                [str(rt.threads)],
                "runtime.threads",
                f"Use {rt.threads} CPU threads for the layers and experts kept in RAM.",
            )

    def _flash_attn_note(self, value: FlashAttention, quantized_v: bool, b: SpecBuilder) -> str:
        if value is FlashAttention.ON:
            return (
                "Flash attention on; a quantized V cache needs it."
                if quantized_v
                else ("Flash attention on.")
            )
        if value is FlashAttention.OFF:
            return "Flash attention off."
        return "Flash attention chosen by the engine per device."

    def _gpu_layers_note(self, value: str) -> str:
        if value == "999":
            return "Offload every layer to the GPU (999 means all)."
        if value == "0":
            return "Keep every layer on the CPU."
        return f"Offload {value} layers, counted from the output end, to the GPU."

    def _emit_gpu_layers(self, plan: Plan, b: SpecBuilder) -> None:
        ngl = plan.runtime.n_gpu_layers
        value = "999" if ngl is None else str(ngl)
        b.emit(Option.GPU_LAYERS, [value], "runtime.n_gpu_layers", self._gpu_layers_note(value))

    def _check_fit_alone(self, plan: Plan, b: SpecBuilder) -> None:
        if plan.runtime.n_gpu_layers is not None:
            raise AdapterError(
                f"the engine's fit cannot be combined with a fixed GPU layer count "
                f"(-ngl {plan.runtime.n_gpu_layers}) on {describe_build(b.build)}",
                hint="Clear 'GPU layers' to let fit choose, or pick another expert placement.",
            )

    def _emit_expert_placement(self, plan: Plan, model: ModelInfo | None, b: SpecBuilder) -> None:
        """``--n-cpu-moe N`` / ``--cpu-moe`` (or their ``-ot`` equivalent) after ``-ngl``."""
        rt = plan.runtime
        if rt.moe is MoePlacement.N_CPU_MOE and rt.n_cpu_moe > 0:
            wanted = f"--n-cpu-moe {rt.n_cpu_moe}"
        elif rt.moe is MoePlacement.ALL_CPU:
            wanted = "--cpu-moe"
        else:
            return
        if model is not None and not model.is_moe:
            b.warn(f"The model has no experts, so {wanted} would do nothing; it is left out.")
            return
        if rt.moe is MoePlacement.ALL_CPU:
            if b.accepts(Option.CPU_MOE):
                b.emit(
                    Option.CPU_MOE,
                    [],
                    "runtime.moe",
                    "Keep every expert tensor in system RAM; attention and shared weights stay "
                    "on the GPU.",
                )
            else:
                b.emit(
                    Option.OVERRIDE_TENSOR,
                    [self._experts_regex(None) + "=CPU"],
                    "runtime.moe",
                    "Keep every expert tensor in system RAM (the build has no --cpu-moe).",
                    purpose="keeping the experts in system RAM",
                )
            return
        n = rt.n_cpu_moe
        if model is not None and model.n_layer and n > model.n_layer:
            b.warn(
                f"--n-cpu-moe {n} is more than the model's {model.n_layer} layers; every "
                "layer's experts stay in system RAM."
            )
        if b.accepts(Option.N_CPU_MOE):
            b.emit(
                Option.N_CPU_MOE,
                [str(n)],
                "runtime.n_cpu_moe",
                f"Keep the expert tensors of the first {n} layers in system RAM.",
            )
        else:
            b.emit(
                Option.OVERRIDE_TENSOR,
                [self._experts_regex(n) + "=CPU"],
                "runtime.n_cpu_moe",
                f"Keep the expert tensors of the first {n} layers in system RAM (the build has "
                "no --n-cpu-moe).",
                purpose=f"keeping the experts of {n} layers in system RAM",
            )

    def _experts_regex(self, n_layers: int | None) -> str:
        """The tensor pattern ``--n-cpu-moe N`` (or ``--cpu-moe`` when None) stands for."""
        tensors = self.expert_tensors
        if n_layers is None:
            return rf"\.{tensors}"
        layers = "|".join(str(i) for i in range(n_layers))
        return rf"blk\.({layers})\.{tensors}"

    # -- flavour-specific ---------------------------------------------------------------------

    def _emit_placement(self, plan: Plan, model: ModelInfo | None, b: SpecBuilder) -> None:
        raise NotImplementedError

    def _emit_load_mode(self, plan: Plan, b: SpecBuilder) -> None:
        raise NotImplementedError

    def _emit_draft_model(self, plan: Plan, b: SpecBuilder) -> None:
        """A separate draft model's flags; the adapters use ``engines.draft``."""

    def _emit_mtp(self, plan: Plan, model: ModelInfo | None, b: SpecBuilder) -> None:
        raise NotImplementedError

    def _emit_logging(self, plan: Plan, b: SpecBuilder, for_mtpstudio_launch: bool) -> None:
        raise NotImplementedError

    # -- probing support ----------------------------------------------------------------------

    def probe_candidates(self) -> tuple[tuple[str, str | None], ...]:
        """Every spelling this adapter may emit, with a value its parser accepts.

        For the ``<flag> <value> --version`` probe: a build's ``accepted_flags`` should hold
        the result for each of these.
        """
        seen: dict[str, str | None] = {}
        for entry in self.spellings.values():
            for spelling in entry.spellings:
                seen.setdefault(spelling, entry.probe_value)
        return tuple(seen.items())


def emit_draft_limits(
    b: SpecBuilder, plan: Plan, *, depth_purpose: str, depth_note: str = ""
) -> None:
    """The draft depth, minimum depth and p-min flags, for MTP and a draft model alike."""
    mtp = plan.mtp
    b.emit(
        Option.DRAFT_MAX,
        [str(mtp.draft_max)],
        "mtp.draft_max",
        f"Draft at most {mtp.draft_max} tokens per step{depth_note}.",
        purpose=depth_purpose,
    )
    if mtp.draft_min > 0:
        b.emit(
            Option.DRAFT_MIN,
            [str(mtp.draft_min)],
            "mtp.draft_min",
            f"Draft at least {mtp.draft_min} tokens per step.",
            purpose="the minimum draft depth",
        )
    b.emit(
        Option.DRAFT_P_MIN,
        [format_float(mtp.draft_p_min)],
        "mtp.draft_p_min",
        f"Stop drafting when the draft's probability falls below {format_float(mtp.draft_p_min)}.",
        purpose="the draft p-min",
    )


def emit_draft_cache_types(
    b: SpecBuilder, plan: Plan, *, whose: str, drafter: str, note: str = ""
) -> None:
    """The draft context's K and V cache types: "Store {whose} K cache as q8_0{note}."."""
    mtp = plan.mtp
    for option, value, setting, which in (
        (Option.DRAFT_CACHE_K, mtp.cache_type_k, "mtp.cache_type_k", "K"),
        (Option.DRAFT_CACHE_V, mtp.cache_type_v, "mtp.cache_type_v", "V"),
    ):
        b.emit(
            option,
            [value.value],
            setting,
            f"Store {whose} {which} cache as {value.value}{note}.",
            purpose=f"the {drafter} {which} cache type",
        )
