"""The Engine page's decisions without Qt: each build's card, the line of what this build and
model cannot use, which choices of a setting are greyed out, and which build the plan runs on."""

from __future__ import annotations

from pathlib import Path

from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.engines.registry import documented_build
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.plan.settings import SETTINGS
from mtpstudio.core.planner.resolve import BuildChoice
from mtpstudio.core.usecases.engine_controls import (
    build_card,
    choice_state,
    chosen_row,
    setting_name,
    unavailable_line,
    unplaced,
)

UP, IK = EngineFlavour.UPSTREAM, EngineFlavour.IK
PROBED = BuildChoice(
    UP,
    EngineBuild(
        Path("/home/ada/llama.cpp/build/bin/llama-server"),
        UP,
        "b11549",
        accepted_flags=frozenset({"-c", "--fit", "--spec-type"}),
        rejected_flags=frozenset({"-mtp"}),
        spec_types=("none",),
    ),
    probed=True,
)
DOCUMENTED = BuildChoice(IK, documented_build(IK), probed=False)


def test_a_probed_build_shows_its_version_path_and_probed_flags() -> None:
    card = build_card(PROBED, None)
    assert "version b11549" in card.title and card.where == str(PROBED.build.binary)
    probed = card.badges[-1]
    assert (probed.text, probed.tone) == ("3 flags probed", "info")
    assert probed.tip == "Accepted: --fit --spec-type -c\nRejected: -mtp"
    mtp = next(b for b in card.badges if b.text.endswith("MTP"))
    assert mtp.text == "✗ MTP" and mtp.tone == "off"  # no draft-mtp among its spec types


def test_a_documented_build_says_it_was_not_found() -> None:
    card = build_card(DOCUMENTED, None)
    assert "not found on this computer" in card.title and "Refresh" in card.where
    assert (card.badges[-1].text, card.badges[-1].tone) == ("documented flags", "warn")


def test_the_line_names_each_setting_by_its_label_and_leaves_out_what_mtp_says() -> None:
    reasons = {
        "runtime.moe=fit": "this build has no --fit",
        "runtime.load_mode": "this build cannot choose",
        "mtp.draft_max": "MTP is off",
        "mtp.enabled=on": "the model has no MTP layer",
    }
    line = unavailable_line(reasons)
    assert line == (
        "Not available with this build and model — Experts (fit): this build has no --fit; "
        "Weights: this build cannot choose"
    )
    assert unavailable_line({}) == "" and setting_name("runtime.ctx") == "Context"


def test_a_greyed_choice_says_why_and_the_current_one_stays() -> None:
    reasons = {"runtime.moe=fit": "this build has no --fit"}
    assert choice_state(reasons, "runtime.moe", "fit", "n_cpu_moe") == (
        False,
        "Not available: this build has no --fit.",
    )
    assert choice_state(reasons, "runtime.moe", "fit", "fit") == (
        True,
        "Not available: this build has no --fit.",
    )
    assert choice_state(reasons, "runtime.moe", "gpu", "fit") == (True, "")


def test_the_plan_runs_on_its_probed_binary_else_its_flavours_documented_flags() -> None:
    choices = [PROBED, DOCUMENTED]
    assert chosen_row(choices, PROBED) == 0
    assert chosen_row(choices, BuildChoice(IK, documented_build(IK), probed=False)) == 1
    other = BuildChoice(UP, documented_build(UP), probed=False)
    assert chosen_row(choices, other) == 0  # none matches: the first


def test_every_engine_page_setting_names_a_group_and_a_new_one_is_placed() -> None:
    forms = {"context": None, "server": None, "drafting": None, "placement": None}
    on_page = [s.path for s in SETTINGS.values() if s.form]
    assert all(SETTINGS[p].form in forms for p in on_page) and len(on_page) == 25
    # the page places each of these itself; one it does not place gets its kind's control
    assert unplaced(forms, set(on_page)) == []
    left_out = set(on_page) - {"runtime.threads"}
    assert [s.path for s in unplaced(forms, left_out)] == ["runtime.threads"]
    assert unplaced({"server": None}, set()) == [SETTINGS[p] for p in on_page if "server." in p]
