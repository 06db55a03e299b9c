"""The doctor's findings and the Plan changes they propose (each one makes a valid Plan)."""

from __future__ import annotations

from mtpstudio.core.bench.ab import ABReport
from mtpstudio.core.bench.doctor import diagnose
from mtpstudio.core.bench.results import VramPeak
from mtpstudio.core.plan.io import plan_with
from mtpstudio.core.plan.schema import Plan

from .samples import report

GIB = 1024**3


def codes(findings: list) -> list[str]:  # type: ignore[type-arg]
    return [f.code for f in findings]


def test_healthy_run_has_no_findings() -> None:
    r = report(rows=[[(16, 10, 9, 100.0)]])
    assert diagnose(r, Plan()) == []


def test_low_acceptance_proposes_fewer_drafts_then_off() -> None:
    r = report(rows=[[(16, 10, 5, 100.0)]])  # 50 %
    plan = plan_with(Plan(), {"mtp.draft_max": 3})
    (finding,) = diagnose(r, plan)
    assert finding.code == "low-acceptance"
    assert [x.changes for x in finding.remedies] == [{"mtp.draft_max": 2}, {"mtp.enabled": False}]
    for remedy in finding.remedies:
        plan_with(plan, remedy.changes)
    one = plan_with(Plan(), {"mtp.draft_max": 1})
    assert [x.changes for x in diagnose(r, one)[0].remedies] == [{"mtp.enabled": False}]


def test_a_fixed_draft_still_gets_draft_fewer() -> None:
    """min = max is the state the graphs-recapture finding recommends; "draft fewer" lowers
    both (it was dropped as an invalid plan: draft min above draft max)."""
    r = report(rows=[[(16, 10, 5, 100.0)]])  # 50 % accepted
    fixed = plan_with(Plan(), {"mtp.draft_max": 3, "mtp.draft_min": 3})
    (finding,) = diagnose(r, fixed)
    assert finding.code == "low-acceptance"
    assert [(x.label, x.changes) for x in finding.remedies] == [
        ("draft fewer tokens (3 -> 2)", {"mtp.draft_max": 2, "mtp.draft_min": 2}),
        ("turn MTP off", {"mtp.enabled": False}),
    ]
    assert finding.remedies[0].apply(fixed).mtp.draft_max == 2
    assert finding.to_dict()["remedies"][0] == {
        "label": "draft fewer tokens (3 -> 2)",
        "plan_changes": {"mtp.draft_max": 2, "mtp.draft_min": 2},
    }


def test_no_drafts_flagged_first() -> None:
    r = report(rows=[[(16, 0, 0, 100.0)]])
    (finding,) = diagnose(r, Plan())
    assert finding.code == "drafting-off" and not finding.remedies
    (on_ik,) = diagnose(r, plan_with(Plan(), {"engine.flavour": "ik"}))
    assert on_ik.remedies[0].changes == {"engine.flavour": "upstream"}


def test_vram_above_95_percent() -> None:
    r = report(rows=[[(16, 10, 9, 100.0)]])
    r.vram = [VramPeak("CUDA0", int(11.6 * GIB), 12 * GIB, 40)]
    plan = plan_with(Plan(), {"runtime.ctx": 32768, "runtime.cache_type_k": "f16",
                              "runtime.cache_type_v": "f16"})  # fmt: skip
    (finding,) = diagnose(r, plan)
    assert finding.code == "vram-full" and "96.7%" in finding.message
    changes = [x.changes for x in finding.remedies]
    assert changes[0] == {"runtime.ctx": 16384}
    assert changes[1]["runtime.cache_type_k"] == "q8_0"
    assert changes[2] == {"runtime.fit_margin_mib": 1536}
    r.vram = [VramPeak("CUDA0", int(11.0 * GIB), 12 * GIB, 40)]
    assert diagnose(r, plan) == []


def test_p_min_below_075() -> None:
    r = report(rows=[[(16, 10, 9, 100.0)]])
    plan = plan_with(Plan(), {"mtp.draft_p_min": 0.5})
    (finding,) = diagnose(r, plan)
    assert finding.code == "p-min-low"
    assert finding.remedies[0].changes == {"mtp.draft_p_min": 0.75}
    assert diagnose(r, plan_with(plan, {"mtp.enabled": False})) == []


def test_graphs_control_faster_means_recapture() -> None:
    a = report("graphs-on", rows=[[(16, 10, 9, 100.0)]])
    b = report("graphs-off", rows=[[(16, 10, 9, 120.0)]])
    plan = plan_with(Plan(), {"mtp.draft_min": 0, "mtp.draft_max": 3})
    assert "graphs-recapture" not in codes(diagnose(a, plan, ABReport(a, b)))  # B not a control
    b.env = {"GGML_CUDA_DISABLE_GRAPHS": "1"}
    (finding,) = diagnose(a, plan, ABReport(a, b))
    assert finding.code == "graphs-recapture"
    assert finding.remedies[0].changes == {"mtp.draft_min": 3}
    slower = report("graphs-off", rows=[[(16, 10, 9, 90.0)]])
    slower.env = {"GGML_CUDA_DISABLE_GRAPHS": "1"}
    assert diagnose(a, plan, ABReport(a, slower)) == []
