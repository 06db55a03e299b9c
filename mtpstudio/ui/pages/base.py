"""What every wizard page shares: the state, a slug for screenshots, refresh from the Plan."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QWidget, QWizardPage

from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.plan.schema import Plan
from mtpstudio.ui.formatting import error_sentence
from mtpstudio.ui.state import WizardState


class PlanPage(QWizardPage):
    """A page that shows and edits a slice of ``state.plan``.

    Subclasses build their widgets in ``__init__`` and fill them in ``refresh`` (from the
    state, with their own signals blocked); user edits go through ``apply`` which validates the
    change and reports a refused one with ``plan_refused``.
    """

    slug = "page"

    def __init__(self, state: WizardState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._refreshing = False
        self._applying = False
        self.last_refusal: str | None = None
        state.plan_changed.connect(self._on_plan_changed)

    def initializePage(self) -> None:
        self.refresh()

    def cleanupPage(self) -> None:
        """Going back keeps what the user chose (the Plan holds it), unlike QWizard's default."""

    def refresh(self) -> None:
        """Fill the widgets from the state (subclasses extend ``_refresh``)."""
        self._refreshing = True
        try:
            self._refresh()
        finally:
            self._refreshing = False

    def _refresh(self) -> None:
        raise NotImplementedError

    def _on_plan_changed(self, plan: object) -> None:
        """The Plan was replaced from elsewhere (File > Open, another page): show it."""
        if self.is_current() and not self._refreshing and not self._applying:
            self.refresh()

    def is_current(self) -> bool:
        wizard = self.wizard()
        return wizard is not None and wizard.currentPage() is self

    def apply(self, changes: dict[str, Any]) -> Plan | None:
        """Write ``changes`` into the Plan; on refusal say why and show the Plan's values."""
        if self._refreshing:
            return None
        self._applying = True
        try:
            plan = self.state.update(changes)
        except MtpStudioError as exc:
            self._applying = False
            self.last_refusal = error_sentence(exc)
            self.plan_refused(self.last_refusal)
            self.refresh()
            return None
        finally:
            self._applying = False
        self.last_refusal = None
        self.plan_refused(None)
        self._after_apply(plan)
        return plan

    def _after_apply(self, plan: Plan) -> None:
        """Called after a change of this page went into the Plan."""

    def plan_refused(self, sentence: str | None) -> None:
        """Show (or clear) why the last change was refused; pages override to place it."""
