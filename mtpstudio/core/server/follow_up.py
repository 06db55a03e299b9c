"""After a healthy launch: the memory reconciliation, and the server as a benchmark target."""

from __future__ import annotations

from mtpstudio.core.bench.target import BenchTarget
from mtpstudio.core.engines.apikey import plan_api_key
from mtpstudio.core.engines.registry import describe_build, memory_facts
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.server.launch import PreparedLaunch, predict_budget
from mtpstudio.core.server.load_log import LoadReport
from mtpstudio.core.server.reconcile import (
    Reconciliation,
    build_key,
    reconcile,
    save_measurement,
)


def measure_launch(
    prepared: PreparedLaunch, report: LoadReport, *, record: bool = True
) -> tuple[Reconciliation | None, str | None]:
    """Predict the plan's budget on this machine and set it against the logged sizes.

    Runs detection (slow: call it off the GUI thread). ``record`` stores the measurement for
    "last measured". Returns the reconciliation (None when nothing could be predicted) and what
    went wrong, as one sentence, if anything did.
    """
    try:
        budget, device = predict_budget(
            prepared.plan, prepared.model, prepared.build, prepared.draft_model
        )
    except MtpStudioError as exc:
        return None, str(exc)
    facts = memory_facts(prepared.build)
    rec = reconcile(budget, report, facts, build_key(prepared.build), device)
    if record:
        try:
            save_measurement(rec)
        except MtpStudioError as exc:
            return rec, f"measurement not saved: {exc}"
    return rec, None


def bench_target(prepared: PreparedLaunch, base_url: str, label: str | None = None) -> BenchTarget:
    """The launched server as the benchmark sees it (drafting requested, build, device)."""
    plan = prepared.plan
    return BenchTarget(
        base_url=base_url,
        flavour=plan.engine.flavour,
        label=label or plan.model.label,
        drafting_requested=bool(plan.mtp.enabled) or plan.draft.path is not None,
        api_key=plan_api_key(plan.server.api_key_file),
        plan=plan,
        engine_build=describe_build(prepared.build),
        device=plan.device,
    )
