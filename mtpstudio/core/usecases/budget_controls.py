"""What the Budget page's controls say for a plan: enabled or why not, their notes, the Fit
buttons' words, the page's title (Qt-free; the page only paints it)."""

from __future__ import annotations

from dataclasses import dataclass

from mtpstudio.core.engines.availability import mtp_reason
from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.choices import MoePlacement
from mtpstudio.core.plan.schema import Plan
from mtpstudio.core.planner.resolve import ResolvedTarget

__all__ = ["BudgetControls", "ControlState", "budget_controls"]

CPU_FIT_SENTENCE = "The Fit buttons plan for a GPU; this plan is for the CPU."


@dataclass(frozen=True)
class ControlState:
    """One slider: ``reason`` why it cannot be used (None: enabled); ``note`` the words beside
    it (None: the page keeps what it shows)."""

    reason: str | None = None
    note: str | None = None

    @property
    def enabled(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class BudgetControls:
    """The Budget page's controls for one plan, decided."""

    draft: ControlState
    cpu_layers: ControlState
    margin: ControlState
    ctx_note: str
    fit_offload_text: str
    fit_offload_tip: str
    fit_enabled: bool
    fit_note: str | None  # None: the fit label keeps what it shows
    title: str


def budget_controls(
    plan: Plan,
    build: EngineBuild,
    model: ModelInfo | None,
    target: ResolvedTarget | None,
    *,
    evaluated: bool,
    planned: bool,
) -> BudgetControls:
    """The controls for ``plan`` on ``build`` with ``model``, planned for ``target``.

    ``evaluated``: the plan has an evaluation (False: nothing is known of its device yet);
    ``planned``: the planning context exists (the model was read).
    """
    why_no_mtp = mtp_reason(build, model)
    if plan.mtp.enabled is False:
        why_no_mtp = why_no_mtp or "MTP is off (Engine & options page)"
    on_gpu = evaluated and target is not None and (target.device.is_gpu or plan.is_split)
    why_no_experts = None
    if model is not None and not model.is_moe:
        why_no_experts = "the model has no experts"
    if why_no_experts is None and evaluated and not on_gpu:
        why_no_experts = "this plan is for the CPU: every expert is there"
    experts_note: str | None = why_no_experts
    if why_no_experts is None:
        experts_note = {
            MoePlacement.FIT: "engine fit (drag to fix)",
            MoePlacement.ALL_CPU: "all on the CPU",
        }.get(plan.runtime.moe, "")
    margin_reason = (
        None if on_gpu else "the margin is VRAM kept free on a GPU; this plan is for the CPU"
    )
    dense = why_no_experts is not None
    if plan.is_split:
        text = "Fit: move layers between devices"
        tip = (
            "Keep this context and move the fewest layers from a device that is short to the "
            "one with the most room (-ts)."
        )
    elif dense:
        text = "Fit: fewest layers on the CPU"
        tip = "Keep this context and run the fewest whole layers on the CPU (-ngl) so it fits."
    else:
        text = "Fit: fewest CPU expert layers"
        tip = (
            "Keep this context and move the fewest layers' experts to system RAM so it "
            "fits (whole layers too when that is not enough)."
        )
    return BudgetControls(
        draft=ControlState(why_no_mtp, why_no_mtp),
        cpu_layers=ControlState(why_no_experts, experts_note),
        margin=ControlState(margin_reason, "" if on_gpu else margin_reason),
        ctx_note=f"native {model.context_length:,}" if model is not None else "",
        fit_offload_text=text,
        fit_offload_tip=tip,
        fit_enabled=on_gpu and planned,
        fit_note=None if on_gpu else CPU_FIT_SENTENCE,
        title="VRAM budget" if on_gpu or not evaluated else "Memory budget (CPU)",
    )
