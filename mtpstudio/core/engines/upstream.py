"""Adapter for upstream llama.cpp ``llama-server`` (flags per engines.md §3, §6)."""

from __future__ import annotations

from mtpstudio.core.engines.base import (
    AdapterBase,
    Option,
    SpecBuilder,
    describe_build,
    emit_draft_cache_types,
    emit_draft_limits,
)
from mtpstudio.core.engines.caps import EngineBuild, MtpSupport
from mtpstudio.core.engines.draft import emit_draft_model
from mtpstudio.core.engines.flags import (
    MTP_SPEC_TYPE,
    UPSTREAM_DOCUMENTED_FLAGS,
    UPSTREAM_DOCUMENTED_SPEC_TYPES,
    UPSTREAM_SPELLINGS,
)
from mtpstudio.core.errors import AdapterError
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan import EngineFlavour, FlashAttention, LoadMode, MoePlacement, Plan

__all__ = ["DOCUMENTED_FLAGS", "DOCUMENTED_SPEC_TYPES", "SPELLINGS", "UpstreamAdapter"]

LOG_VERBOSITY_FOR_MTPSTUDIO = "4"  # buffer sizes and fit decisions are logged at >= 4

SPELLINGS = UPSTREAM_SPELLINGS
DOCUMENTED_FLAGS = UPSTREAM_DOCUMENTED_FLAGS
DOCUMENTED_SPEC_TYPES = UPSTREAM_DOCUMENTED_SPEC_TYPES


class UpstreamAdapter(AdapterBase):
    """Plan -> ``llama-server`` command line for upstream llama.cpp builds."""

    flavour = EngineFlavour.UPSTREAM
    spellings = SPELLINGS
    documented_flags = DOCUMENTED_FLAGS
    documented_spec_types = DOCUMENTED_SPEC_TYPES
    documented_mtp = MtpSupport.AVAILABLE
    engine_name = "upstream llama.cpp"

    def build_mtp_blocker(self, build: EngineBuild) -> str | None:
        if build.mtp is not MtpSupport.AVAILABLE or (
            build.spec_types and MTP_SPEC_TYPE not in build.spec_types
        ):
            return (
                f"this build cannot draft with MTP (its --spec-type has no {MTP_SPEC_TYPE}); "
                "choose a newer upstream build"
            )
        return None

    expert_tensors = r"ffn_(up|down|gate|gate_up)_(ch|)exps"

    def _flash_attn_note(self, value: FlashAttention, quantized_v: bool, b: SpecBuilder) -> str:
        if value is FlashAttention.AUTO and quantized_v:
            b.warn(
                "Flash attention is on auto with a quantized V cache: if the engine turns it "
                "off on a device, loading fails; set flash attention on."
            )
        return super()._flash_attn_note(value, quantized_v, b)

    def _emit_placement(self, plan: Plan, model: ModelInfo | None, b: SpecBuilder) -> None:
        self._emit_layout(plan, model, b)
        if plan.runtime.op_offload or plan.device == "cpu":
            return
        emitted = b.emit(
            Option.NO_OP_OFFLOAD,
            [],
            "runtime.op_offload",
            "Run the experts kept in system RAM on the CPU instead of copying them to the GPU "
            "for large batches: saves about one layer's experts of VRAM, slower prompts.",
            required=False,
        )
        if not emitted:
            b.warn(
                f"{describe_build(b.build)} has no --no-op-offload: it copies RAM-resident "
                "experts to the GPU for large batches, as the budget assumes when op offload is on."
            )

    def _emit_layout(self, plan: Plan, model: ModelInfo | None, b: SpecBuilder) -> None:
        rt = plan.runtime
        fit_off_note = (
            "Use exactly the placement below; llama-server's fit (on by default) would re-plan it."
        )
        if plan.device == "cpu":
            if rt.moe is MoePlacement.FIT:
                b.warn("The target is the CPU, so the engine's fit is not used.")
            b.emit(Option.FIT, ["off"], "runtime.moe", fit_off_note, required=False)
            b.emit(
                Option.GPU_LAYERS,
                ["0"],
                "device",
                "Keep every layer on the CPU (the plan's device is cpu).",
            )
            return
        if rt.moe is MoePlacement.FIT:
            self._check_fit_alone(plan, b)
            b.emit(
                Option.FIT,
                ["on"],
                "runtime.moe",
                "Let llama-server place layers and experts so the model fits the free VRAM "
                "(it keeps the context given by -c).",
                purpose="the engine's fit",
            )
            b.emit(
                Option.FIT_TARGET,
                [str(rt.fit_margin_mib)],
                "runtime.fit_margin_mib",
                f"Leave {rt.fit_margin_mib} MiB of VRAM free on each GPU when fitting.",
                purpose="the fit margin",
            )
            return
        b.emit(Option.FIT, ["off"], "runtime.moe", fit_off_note, required=False)
        self._emit_gpu_layers(plan, b)
        self._emit_expert_placement(plan, model, b)

    def _emit_load_mode(self, plan: Plan, b: SpecBuilder) -> None:
        mode = plan.runtime.load_mode
        if mode is LoadMode.MMAP:
            return  # the engine's default (auto: memory-map unless a device cannot)
        if mode is LoadMode.NO_MMAP:
            if b.accepts(Option.LOAD_MODE):
                b.emit(
                    Option.LOAD_MODE,
                    ["none"],
                    "runtime.load_mode",
                    "Read the weights into memory instead of memory-mapping the file.",
                )
            else:
                b.emit(
                    Option.NO_MMAP,
                    [],
                    "runtime.load_mode",
                    "Read the weights into memory instead of memory-mapping the file.",
                    purpose="loading without mmap (-lm none)",
                )
            return
        if b.accepts(Option.LOAD_MODE):
            b.emit(
                Option.LOAD_MODE,
                ["mmap+mlock"],
                "runtime.load_mode",
                "Memory-map the weights and lock them in RAM so they are never swapped out.",
            )
        else:
            b.emit(
                Option.MLOCK,
                [],
                "runtime.load_mode",
                "Lock the weights in RAM so they are never swapped out.",
                purpose="locking the weights in RAM (-lm mmap+mlock)",
            )

    def _emit_mtp(self, plan: Plan, model: ModelInfo | None, b: SpecBuilder) -> None:
        mtp = plan.mtp
        if not mtp.enabled:
            return
        build = b.build
        if build.mtp is not MtpSupport.AVAILABLE or (
            build.spec_types and MTP_SPEC_TYPE not in build.spec_types
        ):
            raise AdapterError(
                f"{describe_build(build)} cannot draft with MTP (its --spec-type has no "
                f"{MTP_SPEC_TYPE})",
                hint="Turn MTP off in the plan, or choose a newer upstream build.",
            )
        if model is not None and not model.has_mtp:
            raise AdapterError(
                f"the model {model.name or model.architecture} has no MTP (nextn) layer, so "
                "MTP drafting cannot run",
                hint="Turn MTP off, or use a GGUF converted with its MTP layer.",
            )
        b.emit(
            Option.SPEC_TYPE,
            [MTP_SPEC_TYPE],
            "mtp.enabled",
            "Draft tokens with the model's own MTP (nextn) layer.",
            purpose="MTP drafting",
        )
        emit_draft_limits(
            b,
            plan,
            depth_purpose="the MTP draft depth",
            depth_note="; each one adds a copy of the recurrent state",
        )
        emit_draft_cache_types(
            b,
            plan,
            whose="the MTP draft context's",
            drafter="MTP draft",
            note=" (independent of the main cache)",
        )

    def _emit_logging(self, plan: Plan, b: SpecBuilder, for_mtpstudio_launch: bool) -> None:
        if not for_mtpstudio_launch:
            return
        emitted = b.emit(
            Option.VERBOSITY,
            [LOG_VERBOSITY_FOR_MTPSTUDIO],
            "launch",
            "Log verbosity 4: prints the buffer sizes mtpstudio compares with its prediction.",
            required=False,
        )
        if not emitted:
            b.warn(
                f"{describe_build(b.build)} has no -lv, so its log may lack the buffer sizes "
                "mtpstudio checks."
            )

    def _emit_draft_model(self, plan: Plan, b: SpecBuilder) -> None:
        emit_draft_model(plan, b)
