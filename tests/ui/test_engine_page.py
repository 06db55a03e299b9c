"""Engine & options page: builds with badges, options into the Plan, reasons when disabled."""

from __future__ import annotations

from PySide6.QtGui import QStandardItemModel

from mtpstudio.core.engines.profiles.upstream import DOCUMENTED_FLAGS as UPSTREAM_FLAGS
from mtpstudio.core.plan.choices import CacheType, EngineFlavour, MoePlacement
from mtpstudio.core.plan.schema import Plan
from mtpstudio.ui.widgets.common import Badge, Tone

from .conftest import (
    IK_BINARY,
    UPSTREAM_BINARY,
    WizardFactory,
    go_to,
    gpu_report,
    no_gpu_report,
    upstream_engine,
)


def _badges(page, row: int) -> dict[str, Tone]:  # type: ignore[no-untyped-def]
    widget = page.build_list.itemWidget(page.build_list.item(row))
    badges = widget.findChildren(Badge)
    return {b.text().removeprefix("✓ ").removeprefix("✗ "): b.tone for b in badges}


def test_builds_are_listed_with_capability_badges(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(Plan())
    go_to(wizard, 2)
    page = wizard.engine_page
    assert [(c.flavour, c.binary) for c in page.choices] == [
        (EngineFlavour.UPSTREAM, UPSTREAM_BINARY),
        (EngineFlavour.IK, IK_BINARY),
    ]
    assert page.build_list.currentRow() == 0
    upstream = _badges(page, 0)
    assert upstream["MTP"] is Tone.GOOD and upstream["fit"] is Tone.GOOD
    assert upstream["draft cache types"] is Tone.GOOD
    assert any(name.endswith("flags probed") for name in upstream)
    ik = _badges(page, 1)
    # issue 25 item 8: this ik build drafts with MTP only for glm4moe, the model is qwen35moe
    assert ik["MTP"] is Tone.OFF
    widget = page.build_list.itemWidget(page.build_list.item(1))
    mtp = next(b for b in widget.findChildren(Badge) if b.text().endswith("MTP"))
    assert mtp.text() == "✗ MTP"
    assert mtp.toolTip().startswith("For this model: ik_llama.cpp runs MTP only for glm4moe")
    assert ik["draft cache types"] is Tone.OFF


def test_without_engines_the_documented_flags_stand_in(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(Plan(), report=no_gpu_report())
    go_to(wizard, 2)
    page = wizard.engine_page
    assert [(c.flavour, c.probed) for c in page.choices] == [
        (EngineFlavour.UPSTREAM, False),
        (EngineFlavour.IK, False),
    ]
    assert _badges(page, 0)["documented flags"] is Tone.WARN
    page.build_list.setCurrentRow(1)
    assert wizard.plan.engine.flavour is EngineFlavour.IK and wizard.plan.engine.binary is None


def test_choosing_a_build_and_options_writes_the_plan(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(Plan())
    go_to(wizard, 2)
    page = wizard.engine_page
    page.ctx.setValue(65536)
    page.cache_k.setCurrentIndex(page.cache_k.findData("q4_0"))
    page.cache_v.setCurrentIndex(page.cache_v.findData("f16"))
    page.draft_max.setValue(3)
    page.draft_p_min.setValue(0.6)
    page.moe.setCurrentIndex(page.moe.findData(MoePlacement.N_CPU_MOE.value))
    page.n_cpu_moe.setValue(12)
    page.margin.setValue(512)
    page.threads.setValue(8)
    page.port.setValue(8081)
    page.api_key_file.setText("/home/me/.config/mtpstudio/key")
    page.api_key_file.editingFinished.emit()
    plan = wizard.plan
    assert plan.runtime.ctx == 65536
    assert (plan.runtime.cache_type_k, plan.runtime.cache_type_v) == (CacheType.Q4_0, CacheType.F16)
    assert (plan.mtp.draft_max, plan.mtp.draft_p_min) == (3, 0.6)
    assert (plan.runtime.moe, plan.runtime.n_cpu_moe) == (MoePlacement.N_CPU_MOE, 12)
    assert plan.runtime.fit_margin_mib == 512
    assert plan.runtime.threads == 8
    assert plan.server.port == 8081
    assert str(plan.server.api_key_file) == "/home/me/.config/mtpstudio/key"
    page.threads.setValue(0)  # "engine default"
    assert wizard.plan.runtime.threads is None
    page.build_list.setCurrentRow(1)
    assert wizard.plan.engine.flavour is EngineFlavour.IK
    assert str(wizard.plan.engine.binary) == IK_BINARY


def test_tooltips_explain_options_and_their_flags(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(Plan())
    go_to(wizard, 2)
    page = wizard.engine_page
    tip = page.ctx.toolTip()
    assert tip.startswith(Plan.model_fields["runtime"].annotation.model_fields["ctx"].description)
    assert "-c 32768: Context window of 32768 tokens" in tip
    assert "--spec-draft-n-max 2" in page.draft_max.toolTip()


def test_mtp_is_disabled_with_the_reason_when_the_build_cannot_run_it(
    make_wizard: WizardFactory,
) -> None:
    wizard = make_wizard(Plan(mtp={"enabled": True}))
    go_to(wizard, 2)
    page = wizard.engine_page
    page.build_list.setCurrentRow(1)  # ik_llama.cpp: MTP only for glm4moe
    reason = page.reasons["mtp.enabled"]
    assert "ik_llama.cpp runs MTP only for glm4moe models" in reason
    assert page.mtp_enabled.isEnabled()  # auto and off stay available
    assert page.mtp_enabled.toolTip().startswith("Not available: ")
    model = page.mtp_enabled.model()
    assert isinstance(model, QStandardItemModel)
    on_row = page.mtp_enabled.findData("on")
    assert model.item(on_row).isEnabled()  # still on in the plan: it can be turned off
    assert not page.draft_max.isEnabled()
    assert not page.draft_cache_k.isEnabled()
    assert "MTP: ik_llama.cpp runs MTP only" in page.unavailable_label.text()
    assert "Draft K cache" not in page.unavailable_label.text()  # said once, for MTP
    page.mtp_enabled.setCurrentIndex(page.mtp_enabled.findData("off"))
    assert wizard.plan.mtp.enabled is False
    assert not model.item(on_row).isEnabled()  # cannot be turned on again with this build


def test_mtp_defaults_to_auto_and_says_what_auto_decided(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(Plan())
    go_to(wizard, 2)
    page = wizard.engine_page
    assert wizard.plan.mtp.enabled is None
    assert page.mtp_enabled.currentData() == "auto"
    assert page.mtp_state.text().startswith("MTP auto: on")  # the demo card has an MTP layer
    page.build_list.setCurrentRow(1)  # ik_llama.cpp cannot run it for qwen35moe
    assert page.mtp_state.text().startswith("MTP auto: off (ik_llama.cpp runs MTP only")
    assert wizard.plan.mtp.enabled is None  # auto stays auto: nothing to turn off
    assert "-mtp" not in wizard.state.evaluation().argv
    go_to(wizard, 3)  # the budget page says it will not run, and what works instead
    verdict = wizard.budget_page.verdict.text()
    assert verdict.startswith("Will NOT run as planned: ik_llama.cpp cannot load this qwen35moe")
    assert "Instead: for MTP on this model use upstream llama.cpp" in verdict


def test_a_build_without_fit_greys_out_that_choice(make_wizard: WizardFactory) -> None:
    no_fit = upstream_engine(frozenset(UPSTREAM_FLAGS - {"--fit", "-fit"}))
    wizard = make_wizard(Plan(runtime={"moe": "n_cpu_moe"}), report=gpu_report([no_fit]))
    go_to(wizard, 2)
    page = wizard.engine_page
    model = page.moe.model()
    assert isinstance(model, QStandardItemModel)
    fit_item = model.item(page.moe.findData(MoePlacement.FIT.value))
    assert not fit_item.isEnabled()
    assert fit_item.toolTip() == "Not available: this build has no --fit."
    assert _badges(page, 0)["fit"] is not Tone.GOOD


def test_a_plan_the_engine_cannot_run_is_said_in_one_sentence(make_wizard: WizardFactory) -> None:
    wizard = make_wizard(Plan())
    go_to(wizard, 2)
    page = wizard.engine_page
    page.host.setText("0.0.0.0")
    page.host.editingFinished.emit()
    assert wizard.plan.server.host == "0.0.0.0"
    assert not page.notice.isHidden()
    assert "needs an API key" in page.notice.text()
    page.host.setText("not a host")
    page.host.editingFinished.emit()
    assert wizard.plan.server.host == "0.0.0.0"  # refused, and said why
    assert "host must be a plain address" in page.notice.text()
    assert page.host.text() == "0.0.0.0"
