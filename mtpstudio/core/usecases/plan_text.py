"""A plan in words, as the faces show it: the CLI's report and JSON, the GUI's legend and speeds.

The text itself is made in the core (``core.plan_text``, ``core.speed.words``, ``core.advice``);
the CLI and the GUI take it from here, through the use-case layer, like everything else.
"""

from __future__ import annotations

from mtpstudio.core.planner.advice import where_words
from mtpstudio.core.planner.text import (
    TRUST_LEGEND,
    budget_report,
    budget_trust,
    combined_trust,
    model_summary_json,
    model_summary_lines,
    plan_report,
    trust_meaning,
)
from mtpstudio.core.speed.words import NOT_MODELLED, speed_lines, speed_summary, step_words

__all__ = [
    "NOT_MODELLED",
    "TRUST_LEGEND",
    "budget_report",
    "budget_trust",
    "combined_trust",
    "model_summary_json",
    "model_summary_lines",
    "plan_report",
    "speed_lines",
    "speed_summary",
    "step_words",
    "trust_meaning",
    "where_words",
]
