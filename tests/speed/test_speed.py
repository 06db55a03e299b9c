"""The speed model (issue 37): what each pass reads where the placement puts it, MTP's tokens per
step, the host's probed rates and their cache, stored runs read as hostile input, the estimate
in `plan` and `plan --json`, measured once a benchmark of the plan is stored."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from support.cli import run_cli
from support.runners import FixedRunner

from mtpstudio.core.bench.history import BenchHistory
from mtpstudio.core.catalog.models import model_card_info
from mtpstudio.core.memory.placement import ModelWeights, PartialKind, PartialLayer, place
from mtpstudio.core.memory.terms import recurrent_state_parts
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import (
    PlanningContext,
    budget_for,
    fit_suggestions,
    machine_for,
    resolve,
    speed_for,
)
from mtpstudio.core.speed import host_rates
from mtpstudio.core.speed.acceptance import Acceptance, position_rate
from mtpstudio.core.speed.estimate import CardRates, DecodeShape, SpeedRates, estimate
from mtpstudio.core.speed.host_probe import PROBE_VERSION
from mtpstudio.core.speed.host_rates import (
    ASSUMED_HOST,
    cache_path,
    load_host_rates,
    rates_from_probe,
)
from mtpstudio.core.speed.inputs import SpeedInputs, run_from_entry
from mtpstudio.core.speed.traffic import (
    HOST,
    ROUTING_REUSE,
    ModelCost,
    Routing,
    expert_share,
    pass_load,
)
from mtpstudio.core.state_files import SchemaError

MOE = "qwen3.6-35b-a3b-iq4_xs"
DENSE = "qwen3.6-27b-iq4_xs"
SEEDS = {"device": "rtx-4070-super", "runtime.ctx": 131072, "runtime.cache_type_k": "q8_0",
         "runtime.cache_type_v": "q8_0", "mtp.draft_max": 3}  # fmt: skip


def card(name: str) -> tuple[ModelInfo, ModelCost]:
    model = model_card_info(name)
    return model, ModelCost.from_model(model, ModelWeights.from_model(model))


def block_bytes(model: ModelInfo, blocks: range) -> tuple[int, int]:
    """(non-expert, expert) bytes of ``blocks`` straight from the tensor table."""
    dense = expert = 0
    for t in model.tensors:
        if t.layer is not None and t.layer in blocks:
            if "_exps" in t.name:
                expert += t.n_bytes
            else:
                dense += t.n_bytes
    return dense, expert


# -- MTP: tokens per step ------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0.0, 0.3, 0.618, 0.73, 0.94, 1.0])
@pytest.mark.parametrize("depth", [1, 2, 3, 5])
def test_an_acceptance_gives_back_itself_and_tokens_per_step(rate: float, depth: int) -> None:
    """accepted / drafted at the depth and p-min it was measured is what the model reproduces;
    with p-min 0 every step drafts in full; a step yields between 1 and depth + 1 tokens, more
    with a deeper draft; p-min 0.75 stops drafts early, so it drafts fewer."""
    for p_min in (0.0, 0.75):
        acc = Acceptance(rate, depth, p_min=p_min)
        drafted = acc.drafts_at(depth, p_min)
        assert acc.accepted_per_step(depth, p_min) / drafted == pytest.approx(rate, abs=1e-6)
        assert 1.0 <= acc.tokens_per_step(depth + 1, p_min) <= depth + 2
        assert acc.tokens_per_step(depth + 1, p_min) >= acc.tokens_per_step(depth, p_min) - 1e-9
    full = Acceptance(rate, depth, p_min=0.0)
    assert full.drafts_at(depth, 0.0) == pytest.approx(depth)
    assert full.tokens_per_step(depth, 0.0) == pytest.approx(1 + rate * depth, abs=1e-6)
    assert Acceptance(rate, depth).drafts_at(depth, 0.75) < depth


def test_a_per_position_count_is_used_as_it_is() -> None:
    """Upstream's /metrics counts accepted drafts per position: those shares add up."""
    acc = Acceptance(0.7, 3, per_position=(0.9, 0.7, 0.5))
    assert acc.accepted_per_step(2) == pytest.approx(1.6)
    assert acc.accepted_per_step(3) == pytest.approx(2.1)
    assert acc.accepted_per_step(4) > acc.accepted_per_step(3)
    assert position_rate(0.94, 3) == pytest.approx(0.97, abs=0.005)  # the seeds' upstream run


# -- what a pass reads where ---------------------------------------------------------------------


def test_routed_experts_a_batch_reads() -> None:
    model = model_card_info(MOE)
    k_over_e = model.n_expert_used / model.n_expert
    assert expert_share(model, 1, Routing.INDEPENDENT) == pytest.approx(k_over_e)
    # two tokens: the first's k, and the second's picks outside them (1 - reuse of its k)
    two = expert_share(model, 2, Routing.INDEPENDENT)
    assert two * model.n_expert == pytest.approx(
        model.n_expert_used * (2 - ROUTING_REUSE) - model.n_expert_used**2 / model.n_expert
        * (1 - ROUTING_REUSE)
    )  # fmt: skip
    independent = 1 - (1 - k_over_e) ** 4  # no reuse at all
    assert k_over_e < expert_share(model, 4, Routing.INDEPENDENT) < independent
    assert expert_share(model, 4, Routing.SAME) == pytest.approx(k_over_e)  # zero weights


def test_a_dense_model_on_the_cpu_reads_every_trunk_weight_once() -> None:
    model, cost = card(DENSE)
    placement = place(model, gpu=False, n_gpu_layers=None, cpu_expert_layers=(), load_mtp=False)
    load = pass_load(model, cost, placement, None, blocks=range(model.n_layer), tokens=1,
                     outputs=1, depth=0, cache_types=("f16", "f16"))  # fmt: skip
    dense, _ = block_bytes(model, range(model.n_layer))
    output = next(t.n_bytes for t in model.tensors if t.name == "output.weight")
    kv = len(model.attention_layers) * 4 * 256 * 2 * 2  # one f16 cell: the token itself
    conv, state = recurrent_state_parts(model)
    states = len(model.recurrent_layers) * 2 * 4 * (conv + state)  # F32, read and written
    assert load.loads[HOST].kv_bytes == pytest.approx(kv)
    assert load.loads[HOST].bytes == pytest.approx(dense + output + kv + states)
    assert set(load.loads) == {HOST} and load.pcie_bytes == 0


def test_experts_in_ram_are_read_there_and_copied_for_a_prompt() -> None:
    """--n-cpu-moe 20: one token reads its routed share of layers 0-19's experts from RAM; a
    512-token prompt copies all of them to the card instead (op offload)."""
    model, cost = card(MOE)
    placement = place(model, gpu=True, n_gpu_layers=None, cpu_expert_layers=range(20),
                      load_mtp=False)  # fmt: skip
    trunk = range(model.n_layer)
    one = pass_load(model, cost, placement, "CUDA0", blocks=trunk, tokens=1, outputs=1,
                    depth=0, cache_types=("f16", "f16"))  # fmt: skip
    _, ram_experts = block_bytes(model, range(20))
    share = model.n_expert_used / model.n_expert
    assert one.loads[HOST].bytes == pytest.approx(ram_experts * share)
    assert one.hops == 2 * 20  # to RAM's experts and back, per layer
    prompt = pass_load(model, cost, placement, "CUDA0", blocks=trunk, tokens=512, outputs=1,
                       depth=0, cache_types=("f16", "f16"))  # fmt: skip
    assert prompt.pcie_bytes == ram_experts and HOST not in prompt.loads


@pytest.mark.parametrize("kind", list(PartialKind))
def test_a_split_layer_reads_its_moved_tensors_from_ram(kind: PartialKind) -> None:
    model, cost = card(MOE)
    placement = place(model, gpu=True, n_gpu_layers=None, cpu_expert_layers=range(12),
                      load_mtp=False, partial=PartialLayer(12, kind))  # fmt: skip
    load = pass_load(model, cost, placement, "CUDA0", blocks=range(12, 13), tokens=1,
                     outputs=0, depth=0, cache_types=("f16", "f16"))  # fmt: skip
    moved = [t for t in model.tensors if t.layer == 12 and kind.moves(t.name)]
    share = model.n_expert_used / model.n_expert
    expected = sum(t.n_bytes * (share if "_exps" in t.name else 1.0) for t in moved)
    assert load.loads[HOST].bytes == pytest.approx(expected)
    assert load.loads["CUDA0"].bytes > 0


# -- the estimate ---------------------------------------------------------------------------------


def seeds_context() -> PlanningContext:
    return PlanningContext(machine_for(None), model_card_info(MOE))


def test_the_seeds_estimate_follows_the_experts_onto_the_card() -> None:
    """Every reclaim that puts expert layers on the 4070 SUPER is estimated faster, and the
    levers are ranked by that estimate."""
    pctx = seeds_context()
    resolved = resolve(plan_with(Plan(), SEEDS), pctx)
    now = speed_for(resolved)
    assert now.mtp and now.depth == 3 and now.trust == "estimate"
    assert now.decode_tok_s > now.plain_tok_s  # the default acceptance pays for drafting
    ranked = [s for s in fit_suggestions(resolved) if s.fits]
    llvmpipe = next(s for s in ranked if s.lever == "desktop:llvmpipe")
    assert llvmpipe.tok_s is not None and llvmpipe.tok_s > now.decode_tok_s
    speeds = [s.tok_s or 0.0 for s in ranked]
    assert speeds == sorted(speeds, reverse=True)
    all_ram = resolve(plan_with(Plan(), {**SEEDS, "runtime.moe": "all_cpu"}), pctx)
    assert speed_for(all_ram).decode_tok_s < now.decode_tok_s


def test_drafts_that_are_never_right_cost_time() -> None:
    """Acceptance 0 (a zero-weight model): MTP decodes slower than without it; acceptance 0.94
    faster."""
    model, cost = card(MOE)
    placement = place(model, gpu=True, n_gpu_layers=None, cpu_expert_layers=(), load_mtp=True)
    rates = SpeedRates(ASSUMED_HOST, {"CUDA0": CardRates("CUDA0", "x", 1000e9, 25e9, "test")})
    shape = DecodeShape("CUDA0", 8, ("f16", "f16"), True, 3, 512)
    never = estimate(model, cost, placement, shape, rates, Acceptance(0.0, 3))
    good = estimate(model, cost, placement, shape, rates, Acceptance(0.94, 3))
    assert never.decode_tok_s < never.plain_tok_s < good.decode_tok_s
    assert good.plain_tok_s == never.plain_tok_s


def test_a_longer_context_and_fewer_threads_are_slower_on_the_cpu() -> None:
    model, cost = card(DENSE)
    placement = place(model, gpu=False, n_gpu_layers=None, cpu_expert_layers=(), load_mtp=False)
    rates = SpeedRates(ASSUMED_HOST)

    def tok_s(threads: int, context: int) -> float:
        shape = DecodeShape(None, threads, ("f16", "f16"), False, 0, 512)
        return estimate(model, cost, placement, shape, rates, None, context=context).decode_tok_s

    assert tok_s(8, 0) > tok_s(8, 32768) and tok_s(1, 0) < tok_s(8, 0)


# -- the host's rates ----------------------------------------------------------------------------


PROBE = {"version": PROBE_VERSION, "read_bytes_per_s": {"1": 20e9, "2": 30e9},
         "gemv_flop_per_s": 5e10, "gemm_flop_per_s": 1e11, "seconds": 0.5}  # fmt: skip


def test_the_probe_runs_once_and_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    # the machine's load is held still: a probe's words say when it was busy, and the test
    # suite's own load on a 2-core machine must not make the re-measured rates read otherwise
    monkeypatch.setattr(host_rates, "load_per_cpu", lambda: 0.0)
    cache_path().unlink(missing_ok=True)
    runner = FixedRunner(json.dumps(PROBE))
    first = load_host_rates(runner=runner)
    assert first is not None and first.measured and len(runner.calls) == 1
    assert first.read_bandwidth(2) == 30e9 and first.read_bandwidth(1) == 20e9
    assert first.read_bandwidth(16) == 30e9  # more threads than probed share the same RAM
    again = load_host_rates(runner=FixedRunner("never asked"))
    assert again == first
    cache_path().write_text("{not json")  # damaged: set aside and measured again
    third = load_host_rates(runner=FixedRunner(json.dumps(PROBE)))
    assert third == first and list(cache_path().parent.glob("host-rates.json.bad-*"))
    cache_path().unlink()


def test_a_cache_of_an_older_probe_is_measured_again() -> None:
    """Probe 2 takes the interpreter's cost of a call out of the arithmetic: a cache of the
    older probe (which counted it) is set aside and measured again."""
    cache_path().unlink(missing_ok=True)
    assert load_host_rates(runner=FixedRunner(json.dumps(PROBE))) is not None
    stored = json.loads(cache_path().read_text())
    stored["key"]["probe"] = stored["probe"]["version"] = PROBE_VERSION - 1
    cache_path().write_text(json.dumps(stored))
    runner = FixedRunner(json.dumps({**PROBE, "gemv_flop_per_s": 6e10}))
    again = load_host_rates(runner=runner)
    assert len(runner.calls) == 1 and again is not None and again.gemv_flop_per_s == 6e10
    cache_path().unlink()


def test_a_probe_taken_while_busy_is_measured_again_when_quieter() -> None:
    """The probe measures what the other programs leave: taken at load 1.8 per CPU it says so,
    is kept while the machine stays busy, and is measured again once the load has halved."""
    cache_path().unlink(missing_ok=True)
    busy = load_host_rates(runner=FixedRunner(json.dumps(PROBE)), load=1.8)
    assert busy is not None and "while it was busy: load 1.8 per CPU" in busy.source
    still = load_host_rates(runner=FixedRunner("never asked"), load=1.2)
    assert still == busy
    runner = FixedRunner(json.dumps({**PROBE, "read_bytes_per_s": {"1": 30e9, "2": 45e9}}))
    quiet = load_host_rates(runner=runner, load=0.3)
    assert len(runner.calls) == 1 and quiet is not None
    assert quiet.read_bandwidth(2) == 45e9 and "busy" not in quiet.source
    assert load_host_rates(runner=FixedRunner("never asked"), load=0.1) == quiet
    cache_path().unlink()


def test_a_failed_probe_plans_with_the_stated_desktop() -> None:
    cache_path().unlink(missing_ok=True)
    assert load_host_rates(runner=FixedRunner("", returncode=1, stderr="boom")) is None
    assert load_host_rates(probe=False) is None and not cache_path().exists()


@pytest.mark.parametrize(
    "bad",
    [
        {**PROBE, "version": 99},
        {**PROBE, "read_bytes_per_s": {}},
        {**PROBE, "read_bytes_per_s": {"x": 1e9}},
        {**PROBE, "read_bytes_per_s": {"1": -5}},
        {**PROBE, "gemv_flop_per_s": True},
        {**PROBE, "gemm_flop_per_s": 1e300},
        [1, 2],
    ],
)
def test_probe_figures_out_of_shape_are_refused(bad: object) -> None:
    with pytest.raises(SchemaError):
        rates_from_probe(bad, 2, "test")


def test_the_real_probe_measures_this_computer() -> None:
    """The probe itself, in its child process: positive figures, more threads no slower."""
    cache_path().unlink(missing_ok=True)
    rates = load_host_rates()
    assert rates is not None and rates.source.startswith("measured on this computer")
    assert rates.gemv_flop_per_s > 1e8 and rates.read_bandwidth(1) > 1e8
    assert cache_path().exists()


# -- stored runs ---------------------------------------------------------------------------------


def stored(plan: Plan, **aggregate: object) -> dict[str, object]:
    agg = {"tok_s": 50.0, "total_draft": 300, "aggregate_accept_rate": 0.8, **aggregate}
    return {"aggregate": agg, "categories": [], "error": None}


@pytest.mark.parametrize(
    "report",
    [
        {"aggregate": {"tok_s": float("nan"), "total_draft": 0}},
        {"aggregate": {"tok_s": -1, "total_draft": 0}},
        {"aggregate": {"tok_s": True, "total_draft": 0}},
        {"aggregate": {"tok_s": 10.0, "total_draft": "many"}},
        {"aggregate": {"tok_s": 10.0, "total_draft": 5}, "error": "server died"},
        {"aggregate": {"tok_s": 10.0, "total_draft": 5}, "cancelled": True},
        {"aggregate": "x"},
        "not a report",
    ],
)
def test_a_stored_run_out_of_shape_is_left_out(report: object) -> None:
    plan = plan_with(Plan(), SEEDS).model_dump(mode="json")
    assert run_from_entry(1, "2026-11-27", "upstream", plan, report) is None


def test_the_newest_run_of_the_model_on_the_engine_gives_the_acceptance() -> None:
    plan = plan_with(Plan(), {**SEEDS, "model.path": "/m/a.gguf", "model.card": None})
    data = json.loads(plan.to_json())  # the form the history stores
    old = run_from_entry(1, "2026-11-01", "upstream", data, stored(plan))
    new = run_from_entry(2, "2026-11-02", "upstream", data,
                         stored(plan, aggregate_accept_rate=0.9))  # fmt: skip
    ik = run_from_entry(3, "2026-11-03", "ik", data, stored(plan, aggregate_accept_rate=0.5))
    assert old and new and ik
    inputs = SpeedInputs(runs=(old, new, ik))
    acc = inputs.acceptance_for("/m/a.gguf", "upstream")
    assert acc.measured and acc.rate == 0.9 and "run 2" in acc.source
    assert not inputs.acceptance_for("/m/other.gguf", "upstream").measured
    assert inputs.measured_for([plan]) is ik


# -- the command line ----------------------------------------------------------------------------


SEEDS_CLI = ("--demo", "--gpu", "rtx-4070-super", "--ctx", "128k", "--cache-type-k", "q8_0",
             "--cache-type-v", "q8_0", "--draft-max", "3")  # fmt: skip


def test_plan_prints_the_estimate_and_its_basis() -> None:
    result = run_cli("plan", *SEEDS_CLI)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert (
        "\nSpeed (estimate): ≈ " in text and " tok/s decoding with MTP (draft depth 3; ≈ " in text
    )
    assert "  one decoding step: " in text
    # the demo's catalogue card is planned on the published PC around it, said in the basis
    assert "  basis: system RAM: " in text and "estimate for another PC: AMD Ryzen 7 9700X" in text
    assert "DDR5-6000 × 2 channels (96 GB/s peak)" in text
    assert "  basis: CUDA0: 504 GB/s (published for the NVIDIA GeForce RTX 4070 SUPER" in text
    assert "  basis: MTP draft depth 3, p-min 0.75: 1.66 drafts and 2.56 tokens per step" in text
    assert "default: the published setup's counters on upstream" in text
    assert "  not known to the estimate: " in text
    here = run_cli("plan", *SEEDS_CLI, "--cpu", "this-pc")
    assert here.returncode == 2 and "unknown CPU 'this-pc'; catalogue ids: ryzen-5-5600" in (
        here.stderr
    )


def test_plan_json_carries_the_estimate_under_speed() -> None:
    result = run_cli("plan", *SEEDS_CLI, "--json")
    assert result.returncode == 0, result.stderr
    speed = json.loads(result.stdout)["speed"]
    assert speed["trust"] == "estimate" and speed["measured_tok_s"] is None
    assert speed["decode_tok_s"] > 0 and speed["decode_tok_s_without_mtp"] > 0
    assert speed["mtp"] is True and speed["draft_depth"] == 3
    assert speed["acceptance"]["rate"] == 0.9393 and speed["acceptance"]["measured"] is False
    step_s = sum(speed["step_ms"].values()) / 1000  # the published counters: 1728 / 676 a step
    assert math.isclose(step_s, 1728 / 676 / speed["decode_tok_s"], rel_tol=0.01)
    assert any(line.startswith("system RAM: ") for line in speed["basis"])
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for key in speed:  # every key is documented
        assert f"`{key}`" in readme, key


def test_a_stored_benchmark_of_the_plan_makes_it_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a benchmark of this very plan is in the history, `plan` says measured, with the
    estimate beside it and its error. The history is this test's own: a stored run of the demo
    card is a measured acceptance every later plan of it would use (MTP auto follows it)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    plan_file = tmp_path / "p.json"
    result = run_cli("plan", *SEEDS_CLI, "--save", str(plan_file))
    assert result.returncode == 0, result.stderr
    from bench.samples import sample

    from mtpstudio.core.bench.results import BenchReport, BenchSettings, CategoryResult
    from mtpstudio.core.plan.io import load_plan

    plan = load_plan(plan_file)
    report = BenchReport("seeds", "upstream", "http://127.0.0.1:9", "/completion",
                         BenchSettings(), "2026-11-27T10:00:00+00:00",
                         plan_json=plan.to_json())  # fmt: skip
    report.categories.append(CategoryResult("code_python", (sample(tps=42.0),)))
    report.wall_s_total = 1.0
    BenchHistory().add_report(report)
    again = run_cli("plan", "--plan", str(plan_file))
    assert again.returncode == 0, again.stderr
    line = next(x for x in again.stdout.splitlines() if x.startswith("Speed ("))
    assert line.startswith("Speed (measured): 42.0 tok/s measured (benchmark run ")
    assert "; estimated ≈ " in line and line.endswith("%)")
    data = json.loads(run_cli("plan", "--plan", str(plan_file), "--json").stdout)["speed"]
    assert data["trust"] == "measured" and data["measured_tok_s"] == 42.0
    assert data["error"] == pytest.approx(data["decode_tok_s"] / 42.0 - 1, abs=1e-3)


def test_the_budget_is_not_changed_by_the_estimate() -> None:
    """The speed model reads the budget; it never moves a byte of it."""
    pctx = seeds_context()
    resolved = resolve(plan_with(Plan(), SEEDS), pctx)
    before = budget_for(resolved)
    speed_for(resolved, before)
    assert budget_for(resolved) == before


# -- the GPU kit's decode probes -----------------------------------------------------------------

KIT = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "cuda_truth"
    / "upstream-11434-cuda-nvidia-h100-80gb-hbm3-2026-11-27"
    / "cuda-truth.tar.gz"
)


def test_the_kits_decode_rows_have_the_estimate_beside_them() -> None:
    """The H100 kit's decode probes (zero weights, MTP 3, drafts never right): the three kinds
    of row are the three equations the card's coefficients solve (per node with and without
    CUDA graphs, the mat-vec kernel's arithmetic per column), so each is met within 3 %; the
    published runs check them (``test_published_runs.py``)."""
    from devkit.cuda_compare import TruthArchive, compare

    lines = compare(TruthArchive.read(KIT)).decode_lines
    found = [
        (line.split()[0], float(m[1]), float(m[2]))
        for line in lines
        if (m := re.search(r"([\d.]+) tok/s, drafted \d+, accepted 0; estimate ([\d.]+)", line))
    ]
    assert len(found) == len(lines) == 6
    for card, measured, estimated in found:
        assert abs(estimated / measured - 1) <= 0.03, (card, measured, estimated)
