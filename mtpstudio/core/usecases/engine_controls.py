"""What the Engine page shows, decided without Qt: each build's card (title, where it is, its
badges) and the line naming what this build and model cannot use.

The page paints these answers; ``Workbench.disabled_reasons`` says what is unavailable and why,
this module says how it reads.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, replace

from mtpstudio.core.engines.availability import build_capabilities, engine_name, mtp_reason
from mtpstudio.core.model.info import ModelInfo
from mtpstudio.core.plan.settings import SETTINGS, Setting, label_of
from mtpstudio.core.planner.resolve import BuildChoice

_SAID_FOR_MTP = ("MTP is off", "MTP cannot be used")
"""Reasons said once, on the MTP control itself, not again in the page's line."""
_NOT_LISTED = frozenset({"mtp.enabled=on", "draft.gpu_layers"})


@dataclass(frozen=True)
class BadgeAnswer:
    """One badge: its words, its tone (``good``, ``warn``, ``off``, ``info``) and its tooltip."""

    text: str
    tone: str
    tip: str


@dataclass(frozen=True)
class BuildCard:
    """A build in the Engine page's list: its title (rich text of fixed words and the build's
    version), where it is, and its badges."""

    title: str
    where: str
    badges: tuple[BadgeAnswer, ...]


def build_card(choice: BuildChoice, model: ModelInfo | None) -> BuildCard:
    """The card of ``choice``; with ``model``, its MTP badge speaks of that model."""
    build = choice.build
    backends = ", ".join(b.value for b in build.backends)
    name = engine_name(choice.flavour)
    if choice.probed:
        title = f"<b>{name}</b> · version {build.version} · {backends}"
        where = str(build.binary)
    else:
        title = f"<b>{name}</b> · not found on this computer"
        where = (
            "Planned with the documented flags of this engine; install a build and press "
            "Refresh on the Hardware page to use its own answers."
        )
    badges = []
    for cap in build_capabilities(build):
        if cap.name == "MTP" and cap.available and model is not None:
            why_not = mtp_reason(build, model)  # the build may draft, but not this model
            if why_not is not None:
                cap = replace(cap, available=False, detail=f"For this model: {why_not}.")
        tone = ("warn" if cap.uncertain else "good") if cap.available else "off"
        mark = "✓" if cap.available else "✗"
        badges.append(BadgeAnswer(f"{mark} {cap.name}", tone, cap.detail))
    if choice.probed:
        accepted, rejected = sorted(build.accepted_flags), sorted(build.rejected_flags)
        tip = f"Accepted: {' '.join(accepted) or 'none'}"
        if rejected:
            tip += f"\nRejected: {' '.join(rejected)}"
        badges.append(BadgeAnswer(f"{len(accepted)} flags probed", "info", tip))
    else:
        badges.append(BadgeAnswer("documented flags", "warn", "Not probed: no binary was found."))
    return BuildCard(title, where, tuple(badges))


def setting_name(key: str) -> str:
    """``runtime.moe=fit`` -> ``Experts (fit)``: a setting, or one choice of it, by its label."""
    path, _, choice = key.partition("=")
    name = label_of(path) if path in SETTINGS else path
    return f"{name} ({choice})" if choice else name


def unavailable_line(reasons: Mapping[str, str]) -> str:
    """One line naming what this build and model cannot use and why ('' when nothing)."""
    lines = [
        f"{setting_name(key)}: {reason}"
        for key, reason in reasons.items()
        if not reason.startswith(_SAID_FOR_MTP) and key not in _NOT_LISTED
    ]
    return "Not available with this build and model — " + "; ".join(lines) if lines else ""


def choice_state(
    reasons: Mapping[str, str], path: str, value: object, current: object
) -> tuple[bool, str]:
    """Whether one choice of a setting can be picked, and the tooltip saying why not ('' when
    nothing stands against it). The current value stays enabled, so the control never hides
    what the plan says."""
    reason = reasons.get(f"{path}={value}")
    return reason is None or value == current, f"Not available: {reason}." if reason else ""


def chosen_row(choices: Sequence[BuildChoice], using: BuildChoice) -> int:
    """The row of ``choices`` the plan runs on: the same probed binary, else the same flavour's
    documented flags (0 when none matches)."""
    selected = 0
    for row, choice in enumerate(choices):
        same_binary = choice.probed and using.probed and choice.build.binary == using.build.binary
        same_flavour = not choice.probed and not using.probed and choice.flavour is using.flavour
        if same_binary or same_flavour:
            selected = row
    return selected


def unplaced(forms: Container[str], placed: Container[str]) -> list[Setting]:
    """The settings of these ``forms`` no control of ``placed`` shows yet, in declared order:
    a form adds the control of their kind (a new setting needs no line on the page)."""
    return [s for s in SETTINGS.values() if s.form in forms and s.path not in placed]
