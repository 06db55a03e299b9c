"""The llama-server argv builder: Plan + probed EngineBuild + its profile -> LaunchSpec (pure).

One builder for every flavour: what differs between engines (spellings, how fit, load modes,
MTP and a draft model are asked for, log verbosity) is read from the build's profile
(``engines/profiles/``). It never touches the file system or runs anything, and it takes the
planner's decisions (MTP on or off, the CPU as the target) as given, never deciding them. Every
flag it emits is one the build accepted when probed; an option that cannot be expressed for the
build raises ``AdapterError`` naming the option and the build; something that works but deserves
attention becomes a warning; something that stops the engine from running the plan as planned
becomes a blocker with what works instead.

Unprobed builds (empty ``accepted_flags``) are refused, unless the caller asks for
``assume_documented=True`` (catalogue/demo planning without a binary): then the flags of the
engine snapshot documented in ``shared/reference/engines.md`` §3 stand in for the probe and the
spec carries a warning saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mtpstudio.core.engines.build import Backend, EngineBuild, MtpSupport
from mtpstudio.core.engines.draft import (
    emit_draft_cache_types,
    emit_draft_limits,
    emit_draft_model,
    emit_spec_type_params,
)
from mtpstudio.core.engines.flags import Option
from mtpstudio.core.engines.mtp import MtpDecision, as_documented
from mtpstudio.core.engines.profiles import era_that_runs, era_words, profile_for
from mtpstudio.core.engines.profiles.engine_profile import EngineProfile, MtpRequest
from mtpstudio.core.engines.spec import QUANTIZED_CACHE_TYPES, LaunchSpec, SpecBuilder
from mtpstudio.core.errors import AdapterError
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import FlashAttention, LoadMode, MoePlacement, SplitMode
from mtpstudio.core.plan.schema import Plan, RpcServer

__all__ = ["EngineDevices", "build_launch_spec"]


@dataclass(frozen=True)
class EngineDevices:
    """The devices a split plan runs on, as the engine names them, in its order (RPC servers
    first, then local GPUs). ``restrict``: the machine has other devices the engine would use
    too, so ``-dev`` names these. ``kinds``: each device's backend (``CUDA``, ``RPC`` …)."""

    names: tuple[str, ...]
    kinds: tuple[str, ...]
    restrict: bool = False


def build_launch_spec(
    plan: Plan,
    build: EngineBuild,
    model: ModelInfo | None = None,
    *,
    mtp: MtpDecision,
    cpu_only: bool,
    for_mtpstudio_launch: bool = False,
    api_key_file: Path | None = None,
    model_path: Path | None = None,
    assume_documented: bool = False,
    devices: EngineDevices | None = None,
) -> LaunchSpec:
    """The LaunchSpec for ``plan`` on ``build``.

    Args:
        plan: the configuration.
        build: the probed binary; its profile (``registry.profile_for``) says how to spell it.
        model: header facts of the model, when known; enables model-specific checks
            (MTP layers, experts, architecture).
        mtp: the MTP decision the planner made (``decide_mtp``, or MTP auto by speed); the
            builder spells it and never decides it again.
        cpu_only: the planner's resolved target is the CPU (``ResolvedPlan.cpu_only``).
        for_mtpstudio_launch: mtpstudio itself starts and watches the server, so ask for
            the log lines it parses (upstream ``-lv 4``).
        api_key_file: a file holding the API key (see ``engines.apikey``); the key then stays
            out of argv and units.
        model_path: the GGUF to load, overriding ``plan.model.path``.
        assume_documented: plan for an unprobed build with the documented flag table.
        devices: for a plan split over several devices, the engine's names for them (None:
            the plan's own count, named by kind).

    Raises:
        AdapterError: an option cannot be expressed for this build, or the plan lacks
            something the command needs (a model file, an API key off loopback).
    """
    profile = profile_for(build)
    build, assumed = _effective_build(build, profile, assume_documented)
    b = SpecBuilder(profile.spellings, build, profile.describe(build))
    if assumed:
        b.warn(
            f"Planned with the documented flags of {profile.name}, not a "
            "probed binary; probe the real build before launching."
        )
    if plan.engine.flavour is not build.flavour:
        raise AdapterError(
            f"the plan is for {plan.engine.flavour.value} but {b.who} is {build.flavour.value}",
            hint="Choose a build of the plan's engine, or switch the plan's engine.",
        )
    if plan.engine.binary is not None and plan.engine.binary != build.binary:
        b.warn(
            f"The plan names the engine binary {plan.engine.binary}, but the command "
            f"uses the probed build at {build.binary}."
        )
    plan = mtp.resolved(plan)
    _emit_model(plan, b, model_path, assumed)
    key_file = _emit_server(plan, b, api_key_file or plan.server.api_key_file)
    _emit_context(plan, b, profile)
    _emit_placement(plan, model, b, profile, cpu_only, mtp_active=mtp.active)
    if plan.is_split and not cpu_only:
        _emit_split(plan, b, profile, devices)
    _emit_load_mode(plan, b, profile)
    _emit_mtp(plan, model, b, profile, assumed or build.version == "documented")
    emit_draft_model(plan, b, profile, cpu_only=cpu_only)
    _check_speculative_slots(plan, b, profile)
    _emit_logging(b, profile, for_mtpstudio_launch)
    return LaunchSpec(
        flavour=build.flavour,
        binary=build.binary,
        flags=tuple(b.notes),
        warnings=tuple(b.warnings),
        env={},
        api_key_file=key_file,
        assumed_documented=assumed,
        blockers=tuple(b.blockers),
        alternatives=tuple(b.alternatives),
    )


def era_verdict(base: EngineProfile, newer: EngineProfile, cannot: str) -> tuple[str, str]:
    """(blocker, instead) when no build was found and only the older era fails the model:
    ``ik_llama.cpp before 8337e4c (2026-08-15) cannot …; builds since then can``."""
    since = era_words(newer).removeprefix(f"{base.name} ")
    older = cannot.replace(f"{base.name} cannot", f"{base.name} builds before {since} cannot", 1)
    stage = f" (`--spec-type {newer.mtp.params.name}:…`)" if newer.mtp.params else ""
    blocker = (
        f"no {base.name} build was found, and the plan is judged by the older documented one: "
        f"{older}; builds since {since}{stage} load it and run its MTP"
    )
    instead = (
        f"pick an {base.name} build from {since} or later (the Engine & options page, or "
        f"--engine PATH), or build one; or use upstream llama.cpp (--engine upstream), or on "
        f"an older {base.name} a GGUF without the MTP layer with a draft model"
    )
    return blocker, instead


def _effective_build(
    build: EngineBuild, profile: EngineProfile, assume_documented: bool
) -> tuple[EngineBuild, bool]:
    if build.accepted_flags:
        return build, False
    if not assume_documented:
        raise AdapterError(
            f"{profile.describe(build)} has not been probed, so mtpstudio does not know "
            "which flags it accepts",
            hint="Run engine detection first (it asks the binary about each flag).",
        )
    return as_documented(build, profile), True


# -- the model, the server, the context ---------------------------------------------------------


def _emit_model(plan: Plan, b: SpecBuilder, model_path: Path | None, assumed: bool) -> None:
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


def _emit_server(plan: Plan, b: SpecBuilder, api_key_file: Path | None) -> Path | None:
    server = plan.server
    if server.is_loopback:
        where = f"Listen on {server.host} only: reachable from this computer, not the network."
    else:
        where = (
            f"Listen on {server.host}: reachable from other machines, so clients need the API key."
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


def _emit_context(plan: Plan, b: SpecBuilder, profile: EngineProfile) -> None:
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
        _flash_attn_note(rt.flash_attn, quantized_v, b, profile),
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


def _flash_attn_note(
    value: FlashAttention, quantized_v: bool, b: SpecBuilder, profile: EngineProfile
) -> str:
    if value is FlashAttention.AUTO:
        if profile.flash_attn_auto_note is not None:
            return profile.flash_attn_auto_note
        if quantized_v and profile.flash_attn_auto_may_turn_off:
            b.warn(
                "Flash attention is on auto with a quantized V cache: if the engine turns it "
                "off on a device, loading fails; set flash attention on."
            )
        return "Flash attention chosen by the engine per device."
    if value is FlashAttention.ON:
        return (
            "Flash attention on; a quantized V cache needs it."
            if quantized_v
            else ("Flash attention on.")
        )
    return "Flash attention off."


# -- placement: the CPU, the engine's fit, or layers and experts as given -----------------------


def _emit_placement(
    plan: Plan,
    model: ModelInfo | None,
    b: SpecBuilder,
    profile: EngineProfile,
    cpu: bool,
    *,
    mtp_active: bool,
) -> None:
    rt = plan.runtime
    fit = profile.fit
    fit_off_note = (
        "Use exactly the placement below; llama-server's fit (on by default) would re-plan it."
    )
    if cpu:
        if rt.moe is MoePlacement.FIT:
            b.warn("The target is the CPU, so the engine's fit is not used.")
        if rt.moe_cache_mib > 0:
            b.warn(
                "The target is the CPU, so the MoE cache is left out (the engine stops with "
                "'MoE cache requires a GPU backend')."
            )
        if fit.off_values is not None:
            b.emit(Option.FIT, list(fit.off_values), "runtime.moe", fit_off_note, required=False)
        b.emit(
            Option.GPU_LAYERS,
            ["0"],
            "device",
            "Keep every layer on the CPU (the plan's device is cpu).",
        )
        return
    if rt.moe is MoePlacement.FIT:
        _emit_fit(plan, b, profile, mtp_active)
    else:
        if fit.off_values is not None:
            b.emit(Option.FIT, list(fit.off_values), "runtime.moe", fit_off_note, required=False)
        _emit_gpu_layers(plan, b)
        _emit_expert_placement(plan, model, b, profile)
    _emit_op_offload(plan, b, profile)
    _emit_moe_cache(plan, model, b)


def _emit_moe_cache(plan: Plan, model: ModelInfo | None, b: SpecBuilder) -> None:
    """``--moe-cache-mib N`` (upstream b11549 on): a GPU cache of the experts of the layers
    whose experts all stay in RAM (``src/llama-moe-cache.cpp``)."""
    mib = plan.runtime.moe_cache_mib
    if mib <= 0:
        return
    if model is not None and not model.is_moe:
        b.warn(
            f"The model has no experts, so the MoE cache ({mib} MiB) is left out (the engine "
            "stops with 'MoE cache requires a MoE model')."
        )
        return
    if not b.accepts(Option.MOE_CACHE_MIB):
        b.block(
            f"{b.who} has no --moe-cache-mib (upstream llama.cpp has it from b11549 on)",
            "MoE cache 0 (off), or upstream llama.cpp b11549 or newer",
        )
        return
    b.emit(
        Option.MOE_CACHE_MIB,
        [str(mib)],
        "runtime.moe_cache_mib",
        f"Keep up to {mib} MiB of the experts held in RAM in a GPU cache, the most recently "
        "used first, for the layers whose experts all stay in RAM (this turns pipeline "
        "parallelism off).",
    )


def _emit_fit(plan: Plan, b: SpecBuilder, profile: EngineProfile, mtp_active: bool) -> None:
    rt = plan.runtime
    fit = profile.fit
    if rt.n_gpu_layers is not None:
        raise AdapterError(
            f"the engine's fit cannot be combined with a fixed GPU layer count "
            f"(-ngl {rt.n_gpu_layers}) on {b.who}",
            hint="Clear 'GPU layers' to let fit choose, or pick another expert placement.",
        )
    margin = rt.fit_margin_mib
    if margin == 0 and fit.zero_margin_reads_as is not None:
        b.warn(
            f"{profile.name} reads a fit margin of 0 as {fit.zero_margin_reads_as} MiB; 1 MiB, "
            "the smallest margin it honours, is used instead."
        )
        margin = 1
    if mtp_active and not fit.counts_mtp_context:
        b.warn(
            f"{profile.name}'s fit does not count the MTP draft context; leave a larger "
            "fit margin so drafting has room."
        )
    b.emit(Option.FIT, list(fit.on_values), "runtime.moe", fit.note, purpose="the engine's fit")
    margins = plan.split.fit_margins_mib if plan.is_split else None
    if margins and profile.split.per_device_margins:
        b.emit(
            fit.margin,
            [",".join(str(m) for m in margins)],
            "split.fit_margins_mib",
            "Leave this much VRAM (MiB) free on each device, in the engine's device order, "
            "when fitting.",
            purpose="the fit margins per device",
        )
        return
    if margins:
        margin = max(margins)
        b.warn(
            f"{profile.name} takes one fit margin for every device: the largest of the plan's "
            f"per-device margins, {margin} MiB, is used."
        )
    b.emit(
        fit.margin,
        [str(margin)],
        "runtime.fit_margin_mib",
        f"Leave {margin} MiB of VRAM free on each GPU when fitting.",
        purpose="the fit margin",
    )


def rpc_protocol_refused(server: tuple[int, int, int], engine: tuple[int, int, int]) -> bool:
    """The engine's RPC client refuses a server of another major or a higher minor version
    (``ggml-rpc.cpp``, b11549 line 407)."""
    return server[0] != engine[0] or server[1] > engine[1]


def _check_rpc_protocols(
    servers: Sequence[RpcServer], b: SpecBuilder, profile: EngineProfile
) -> None:
    """Block a plan whose probed endpoints speak an RPC protocol the engine refuses."""
    engine = profile.rpc_protocol
    for server in servers:
        if server.protocol is not None and rpc_protocol_refused(server.protocol, engine):
            b.block(
                f"the rpc-server at {server.endpoint} speaks RPC protocol "
                f"{'.'.join(map(str, server.protocol))} and {b.who} speaks "
                f"{'.'.join(map(str, engine))}, so the engine would refuse it",
                "the same llama.cpp build on every machine (an rpc-server of the engine's "
                "build), then probe the endpoint again",
            )


def _emit_split(
    plan: Plan, b: SpecBuilder, profile: EngineProfile, devices: EngineDevices | None
) -> None:
    """``--rpc``, ``-dev``, ``-sm`` and ``-ts`` for a plan split over several devices."""
    split = plan.split
    kinds = (
        devices.kinds
        if devices is not None
        else ("RPC",) * len(split.rpc) + ("GPU",) * (1 + len(split.gpus))
    )
    if split.rpc:
        endpoints = ",".join(s.endpoint for s in split.rpc)
        if b.accepts(Option.RPC):
            b.emit(
                Option.RPC,
                [endpoints],
                "split.rpc",
                "Use the rpc-server on each of these machines as a device of its own (the "
                "engine puts them first); each must be running and reachable at launch.",
            )
            if Backend.RPC not in b.build.backends:
                b.warn(
                    "--rpc needs an engine built with the RPC backend (cmake -DGGML_RPC=ON); "
                    "this one was not looked at."
                )
            _check_rpc_protocols(split.rpc, b, profile)
        else:
            b.block(
                f"{b.who} was built without the RPC backend, so it cannot reach {endpoints}",
                "an engine build with RPC (cmake -DGGML_RPC=ON; scripts/build_engines.py "
                "upstream-rpc), or the plan without its RPC endpoints",
            )
    if devices is not None and devices.restrict:
        b.emit(
            Option.DEVICE,
            [",".join(devices.names)],
            "split.gpus",
            "Use only these devices, in this order (the machine has others).",
        )
    mode = profile.split.spelling(split.mode.value)
    if mode is None:
        raise AdapterError(
            f"{profile.name} has no '{split.mode.value}' split mode",
            hint="Use the layer split (-sm layer) with this engine.",
        )
    if split.mode is SplitMode.ROW:
        others = sorted({k for k in kinds if k not in profile.split.row_devices})
        if others:
            b.block(
                f"a row split needs every device to be a CUDA card: the engine stops with "
                f"'device ... does not support split buffers' on {', '.join(others)} devices",
                "the layer split (-sm layer), which every device supports",
            )
        if plan.runtime.moe is MoePlacement.FIT:
            b.warn(
                "The engine's fit does not place weights for a row split ('changing weight "
                "allocation for LLAMA_SPLIT_MODE_ROW not implemented'): it loads every layer "
                "as split by -ts or the devices' free memory."
            )
    b.emit(
        Option.SPLIT_MODE,
        [mode],
        "split.mode",
        "Deal whole layers to the devices."
        if split.mode is SplitMode.LAYER
        else "Split each weight matrix by rows over the CUDA cards (K/V on the first).",
    )
    if split.tensor_split:
        if plan.runtime.moe is MoePlacement.FIT:
            b.warn(
                "A tensor split turns the engine's fit off for the placement ('tensor_split "
                "already set by user'): it loads every layer as the split says."
            )
        b.emit(
            Option.TENSOR_SPLIT,
            [",".join(str(x) for x in split.tensor_split)],
            "split.tensor_split",
            "Share of the layers per device, in the engine's device order.",
        )


def _gpu_layers_note(value: str) -> str:
    if value == "999":
        return "Offload every layer to the GPU (999 means all)."
    if value == "0":
        return "Keep every layer on the CPU."
    return f"Offload {value} layers, counted from the output end, to the GPU."


def _emit_gpu_layers(plan: Plan, b: SpecBuilder) -> None:
    ngl = plan.runtime.n_gpu_layers
    value = "999" if ngl is None else str(ngl)
    b.emit(Option.GPU_LAYERS, [value], "runtime.n_gpu_layers", _gpu_layers_note(value))


def _emit_expert_placement(
    plan: Plan, model: ModelInfo | None, b: SpecBuilder, profile: EngineProfile
) -> None:
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
                [experts_regex(profile, None) + "=CPU"],
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
            [experts_regex(profile, n) + "=CPU"],
            "runtime.n_cpu_moe",
            f"Keep the expert tensors of the first {n} layers in system RAM (the build has "
            "no --n-cpu-moe).",
            purpose=f"keeping the experts of {n} layers in system RAM",
        )


def experts_regex(profile: EngineProfile, n_layers: int | None) -> str:
    """The tensor pattern ``--n-cpu-moe N`` (or ``--cpu-moe`` when None) stands for."""
    tensors = profile.expert_tensors
    if n_layers is None:
        return rf"\.{tensors}"
    layers = "|".join(str(i) for i in range(n_layers))
    return rf"blk\.({layers})\.{tensors}"


def _emit_op_offload(plan: Plan, b: SpecBuilder, profile: EngineProfile) -> None:
    """``--no-op-offload`` where the profile has it and the plan turns op offload off."""
    if plan.runtime.op_offload or Option.NO_OP_OFFLOAD not in profile.spellings:
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
            f"{b.who} has no --no-op-offload: it copies RAM-resident "
            "experts to the GPU for large batches, as the budget assumes when op offload is on."
        )


# -- load mode, MTP, logging --------------------------------------------------------------------


def _emit_load_mode(plan: Plan, b: SpecBuilder, profile: EngineProfile) -> None:
    mode = plan.runtime.load_mode
    if mode is LoadMode.MMAP:
        return  # the engines' default (memory-map unless a device cannot)
    has_lm = Option.LOAD_MODE in profile.spellings
    lm = f" ({b.preferred(Option.LOAD_MODE)} {{}})" if has_lm else ""
    if mode is LoadMode.NO_MMAP:
        note = "Read the weights into memory instead of memory-mapping the file."
        if b.accepts(Option.LOAD_MODE):
            b.emit(Option.LOAD_MODE, ["none"], "runtime.load_mode", note)
        else:
            purpose = "loading without mmap" + lm.format("none")
            b.emit(Option.NO_MMAP, [], "runtime.load_mode", note, purpose=purpose)
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
            "Lock the memory-mapped weights in RAM so they are never swapped out.",
            purpose="locking the weights in RAM" + lm.format("mmap+mlock"),
        )


def _emit_mtp(
    plan: Plan, model: ModelInfo | None, b: SpecBuilder, profile: EngineProfile, assumed: bool
) -> None:
    rule = profile.mtp
    if model is not None and model.n_nextn_layer > 0:
        cannot = rule.unloadable_with_nextn.get(model.architecture)
        if cannot is not None:
            newer = era_that_runs(profile.flavour, model.architecture) if assumed else None
            if newer is not None:  # no build found: speak of builds, not of one engine
                cannot, instead = era_verdict(profile, newer, cannot)
                b.block(cannot, instead)
            else:
                b.block(cannot, rule.instead)
    if not plan.mtp.enabled:
        return
    _check_mtp_request(b, profile)
    architectures = profile.memory.mtp_architectures
    if model is None:
        if rule.unknown_model_warning is not None:
            b.warn(rule.unknown_model_warning)
    elif not model.has_mtp:
        raise AdapterError(
            f"the model {model.name or model.architecture} has no MTP (nextn) layer, so "
            "MTP drafting cannot run",
            hint="Turn MTP off (or leave it on auto), or use a GGUF with its MTP layer.",
        )
    elif model.architecture not in architectures and rule.left_out_for_other_architectures:
        b.block(
            f"{profile.name} honours {rule.words} only for {', '.join(sorted(architectures))} "
            f"models and this model is {model.architecture}, so MTP cannot run: {rule.words} "
            "is left out",
            rule.other_architectures_instead,
        )
        return
    mtp, runtime = plan.mtp, plan.runtime
    own_cache_types = profile.memory.mtp_uses_draft_cache_types
    main_types = (runtime.cache_type_k, runtime.cache_type_v)
    if not own_cache_types and (mtp.cache_type_k, mtp.cache_type_v) != main_types:
        b.warn(
            f"{profile.name}'s MTP context uses the main cache types "
            f"({runtime.cache_type_k.value}/{runtime.cache_type_v.value}); the plan's draft "
            f"cache types ({mtp.cache_type_k.value}/{mtp.cache_type_v.value}) do not apply."
        )
    if rule.request is MtpRequest.SPEC_TYPE_PARAMS:
        assert rule.params is not None
        emit_spec_type_params(b, plan, rule.params, "mtp.enabled", rule.note.rstrip("."),
                              "MTP drafting")  # fmt: skip
    else:
        option = Option.MTP if rule.request is MtpRequest.SWITCH else Option.SPEC_TYPE
        values = [] if rule.spec_type is None else [rule.spec_type]
        b.emit(option, values, "mtp.enabled", rule.note, purpose="MTP drafting")
        depth_note = ""
        if profile.memory.recurrent_rollback_copies:
            depth_note = "; each one adds a copy of the recurrent state"
        emit_draft_limits(b, plan, depth_purpose="the MTP draft depth", depth_note=depth_note)
    if own_cache_types:
        emit_draft_cache_types(b, plan, whose="the MTP draft context's", drafter="MTP draft",
                               note=" (independent of the main cache)")  # fmt: skip


def _check_mtp_request(b: SpecBuilder, profile: EngineProfile) -> None:
    """Raise when the build has no way to ask for MTP (MTP on as asked)."""
    rule = profile.mtp
    build = b.build
    if rule.request is MtpRequest.SWITCH:
        if not b.accepts(Option.MTP):
            raise b.unsupported(Option.MTP, "MTP drafting")
        return
    if rule.request is MtpRequest.SPEC_TYPE_PARAMS:
        assert rule.params is not None
        missing = rule.params.probe not in build.spec_types
    else:
        missing = build.mtp is not MtpSupport.AVAILABLE or bool(
            build.spec_types and rule.spec_type not in build.spec_types
        )
    if missing:
        raise AdapterError(
            f"{b.who} cannot draft with MTP (its --spec-type has no "
            f"{rule.params.name if rule.params else rule.spec_type})",
            hint=f"Turn MTP off in the plan, or choose a newer {profile.name} build.",
        )


def _check_speculative_slots(plan: Plan, b: SpecBuilder, profile: EngineProfile) -> None:
    """A drafting command with more slots than the engine drafts with will not start."""
    most = profile.speculative_max_slots
    drafting = any(n.setting in ("mtp.enabled", "draft.path") for n in b.notes)
    if most is None or not drafting or plan.runtime.parallel <= most:
        return
    b.block(
        f"{profile.name} drafts with {most} server slot{'s' if most != 1 else ''} at most and "
        f"refuses to start with --parallel {plan.runtime.parallel} and speculative decoding",
        f"set runtime.parallel to {most} (--parallel {most}), or turn MTP and the draft model off",
    )


def _emit_logging(b: SpecBuilder, profile: EngineProfile, for_mtpstudio_launch: bool) -> None:
    level = profile.launch_verbosity
    if not for_mtpstudio_launch or level is None:
        return  # the engine prints the buffer sizes at its default verbosity
    emitted = b.emit(
        Option.VERBOSITY,
        [level],
        "launch",
        f"Log verbosity {level}: prints the buffer sizes mtpstudio compares with its prediction.",
        required=False,
    )
    if not emitted:
        b.warn(f"{b.who} has no -lv, so its log may lack the buffer sizes mtpstudio checks.")
