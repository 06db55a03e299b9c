"""Adapter for ik_llama.cpp ``llama-server`` (flags per engines.md §0, §3, §6)."""

from __future__ import annotations

from mtpstudio.core.engines.base import (
    AdapterBase,
    Option,
    SpecBuilder,
    emit_draft_limits,
)
from mtpstudio.core.engines.caps import EngineBuild, MtpSupport
from mtpstudio.core.engines.draft import emit_draft_model
from mtpstudio.core.engines.flags import IK_DOCUMENTED_FLAGS, IK_DOCUMENTED_SPEC_TYPES, IK_SPELLINGS
from mtpstudio.core.errors import AdapterError
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan import EngineFlavour, FlashAttention, LoadMode, MoePlacement, Plan

__all__ = ["DOCUMENTED_FLAGS", "DOCUMENTED_SPEC_TYPES", "IK_MTP_ARCHITECTURES", "SPELLINGS",
           "IkAdapter"]  # fmt: skip

IK_MTP_ARCHITECTURES = frozenset({"glm4moe"})
"""Architectures whose MTP ik_llama.cpp honours (engines.md §0.1: GLM-4.x MoE only)."""

IK_INSTEAD = (
    "for MTP on this model use upstream llama.cpp (--engine upstream); on ik_llama.cpp use a "
    "GGUF converted without the MTP layer, with a draft model for speculative decoding"
)
"""What works where ik_llama.cpp cannot run the model's MTP (engines.md §0.1)."""

IK_FIT_MARGIN_DEFAULT_MIB = 1024  # ik reads --fit-margin 0 as this

SPELLINGS = IK_SPELLINGS
DOCUMENTED_FLAGS = IK_DOCUMENTED_FLAGS
DOCUMENTED_SPEC_TYPES = IK_DOCUMENTED_SPEC_TYPES


class IkAdapter(AdapterBase):
    """Plan -> ``llama-server`` command line for ik_llama.cpp builds."""

    flavour = EngineFlavour.IK
    spellings = SPELLINGS
    documented_flags = DOCUMENTED_FLAGS
    documented_spec_types = DOCUMENTED_SPEC_TYPES
    documented_mtp = MtpSupport.UNKNOWN_UNTIL_LAUNCH
    engine_name = "ik_llama.cpp"

    def build_mtp_blocker(self, build: EngineBuild) -> str | None:
        if not SpecBuilder(self.spellings, build).accepts(Option.MTP):
            return "this ik_llama.cpp build has no -mtp flag"
        return None

    def _flash_attn_note(self, value: FlashAttention, quantized_v: bool, b: SpecBuilder) -> str:
        if value is FlashAttention.AUTO:
            return "Flash attention: ik_llama.cpp reads auto as on."
        return super()._flash_attn_note(value, quantized_v, b)

    def _emit_placement(self, plan: Plan, model: ModelInfo | None, b: SpecBuilder) -> None:
        rt = plan.runtime
        if plan.device == "cpu":
            if rt.moe is MoePlacement.FIT:
                b.warn("The target is the CPU, so the engine's fit is not used.")
            b.emit(
                Option.GPU_LAYERS,
                ["0"],
                "device",
                "Keep every layer on the CPU (the plan's device is cpu).",
            )
            return
        if rt.moe is MoePlacement.FIT:
            self._check_fit_alone(plan, b)
            margin = rt.fit_margin_mib
            if margin == 0:
                b.warn(
                    "ik_llama.cpp reads a fit margin of 0 as 1024 MiB; 1 MiB, the smallest "
                    "margin it honours, is used instead."
                )
                margin = 1
            if plan.mtp.enabled and (model is None or model.architecture in IK_MTP_ARCHITECTURES):
                b.warn(
                    "ik_llama.cpp's fit does not count the MTP draft context; leave a larger "
                    "fit margin so drafting has room."
                )
            b.emit(
                Option.FIT,
                [],
                "runtime.moe",
                "Let ik_llama.cpp offload every layer and move experts to RAM, last layer "
                "first, until the model fits (it never changes the context).",
                purpose="the engine's fit",
            )
            b.emit(
                Option.FIT_MARGIN,
                [str(margin)],
                "runtime.fit_margin_mib",
                f"Leave {margin} MiB of VRAM free on each GPU when fitting.",
                purpose="the fit margin",
            )
            return
        self._emit_gpu_layers(plan, b)
        self._emit_expert_placement(plan, model, b)

    def _emit_load_mode(self, plan: Plan, b: SpecBuilder) -> None:
        mode = plan.runtime.load_mode
        if mode is LoadMode.NO_MMAP:
            b.emit(
                Option.NO_MMAP,
                [],
                "runtime.load_mode",
                "Read the weights into memory instead of memory-mapping the file.",
                purpose="loading without mmap",
            )
        elif mode is LoadMode.MLOCK:
            b.emit(
                Option.MLOCK,
                [],
                "runtime.load_mode",
                "Lock the memory-mapped weights in RAM so they are never swapped out.",
                purpose="locking the weights in RAM",
            )

    def _emit_mtp(self, plan: Plan, model: ModelInfo | None, b: SpecBuilder) -> None:
        mtp = plan.mtp
        if model is not None and model.architecture == "qwen35moe" and model.n_nextn_layer > 0:
            b.block(
                "ik_llama.cpp cannot load this qwen35moe GGUF: it treats the MTP block as an "
                "ordinary layer and stops at a missing tensor",
                IK_INSTEAD,
            )
        if not mtp.enabled:
            return
        if not b.accepts(Option.MTP):
            raise b.unsupported(Option.MTP, "MTP drafting")
        if model is None:
            b.warn(
                "ik_llama.cpp decides at load time whether MTP is active (this snapshot honours "
                "it only for GLM-4.x MoE models); check the log for 'MTP will be disabled'."
            )
        elif not model.has_mtp:
            raise AdapterError(
                f"the model {model.name or model.architecture} has no MTP (nextn) layer, so "
                "MTP drafting cannot run",
                hint="Turn MTP off (or leave it on auto), or use a GGUF with its MTP layer.",
            )
        elif model.architecture not in IK_MTP_ARCHITECTURES:
            b.block(
                f"ik_llama.cpp honours -mtp only for {', '.join(sorted(IK_MTP_ARCHITECTURES))} "
                f"models and this model is {model.architecture}, so MTP cannot run: -mtp is "
                "left out",
                "for MTP on this model use upstream llama.cpp (--engine upstream); on "
                "ik_llama.cpp use a draft model for speculative decoding",
            )
            return
        runtime = plan.runtime
        if (mtp.cache_type_k, mtp.cache_type_v) != (runtime.cache_type_k, runtime.cache_type_v):
            b.warn(
                "ik_llama.cpp's MTP context uses the main cache types "
                f"({runtime.cache_type_k.value}/{runtime.cache_type_v.value}); the plan's draft "
                f"cache types ({mtp.cache_type_k.value}/{mtp.cache_type_v.value}) do not apply."
            )
        b.emit(
            Option.MTP,
            [],
            "mtp.enabled",
            "Draft tokens with the model's own MTP (nextn) layer, where ik_llama.cpp supports it.",
            purpose="MTP drafting",
        )
        emit_draft_limits(b, plan, depth_purpose="the MTP draft depth")

    def _emit_logging(self, plan: Plan, b: SpecBuilder, for_mtpstudio_launch: bool) -> None:
        """ik prints the buffer sizes at its default verbosity; nothing to add."""

    def _emit_draft_model(self, plan: Plan, b: SpecBuilder) -> None:
        emit_draft_model(plan, b)
