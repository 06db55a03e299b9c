"""Read-only code views with syntax highlighting: INI-ish (unit, env file), shell, and diffs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QSyntaxHighlighter,
    QTextCharFormat,
    QTextDocument,
)
from PySide6.QtWidgets import QPlainTextEdit, QWidget


def _format(colour: str, *, bold: bool = False, italic: bool = False) -> QTextCharFormat:
    fmt = QTextCharFormat()
    fmt.setForeground(QColor(colour))
    if bold:
        fmt.setFontWeight(QFont.Weight.Bold)
    fmt.setFontItalic(italic)
    return fmt


@dataclass(frozen=True)
class Rule:
    """A pattern and the format of its match (group 1 when the pattern has a group)."""

    name: str
    pattern: re.Pattern[str]
    fmt: QTextCharFormat


COMMENT = _format("#6b7280", italic=True)
SECTION = _format("#7c3aed", bold=True)
KEY = _format("#1d4ed8", bold=True)
STRING = _format("#047857")
VARIABLE = _format("#b45309")
FLAG = _format("#be185d")
KEYWORD = _format("#7c3aed", bold=True)
ADDED = _format("#166534")
REMOVED = _format("#b91c1c")
HUNK = _format("#7c3aed", bold=True)


class RuleHighlighter(QSyntaxHighlighter):
    """Applies ``rules`` in order to each line; later rules win where they overlap."""

    rules: Sequence[Rule] = ()

    def __init__(self, document: QTextDocument) -> None:
        super().__init__(document)

    def highlightBlock(self, text: str) -> None:
        for rule in self.rules:
            for match in rule.pattern.finditer(text):
                group = 1 if rule.pattern.groups else 0
                start, end = match.span(group)
                if end > start:
                    self.setFormat(start, end - start, rule.fmt)

    def names_at(self, text: str, column: int) -> list[str]:
        """Which rules cover ``column`` of a line ``text`` (for tests)."""
        out = []
        for rule in self.rules:
            for match in rule.pattern.finditer(text):
                group = 1 if rule.pattern.groups else 0
                start, end = match.span(group)
                if start <= column < end:
                    out.append(rule.name)
        return out


class IniHighlighter(RuleHighlighter):
    """systemd units and environment files: ``[Section]``, ``Key=``, ``%`` specifiers, comments."""

    rules = (
        Rule("key", re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*="), KEY),
        Rule("variable", re.compile(r"%[a-zA-Z%]|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?"), VARIABLE),
        Rule("string", re.compile(r"\"(?:[^\"\\]|\\.)*\"|'[^']*'"), STRING),
        Rule("section", re.compile(r"^\s*\[[^\]]+\]\s*$"), SECTION),
        Rule("comment", re.compile(r"^\s*[#;].*$"), COMMENT),
    )


class ShellHighlighter(RuleHighlighter):
    """bash scripts: keywords, flags, variables, quoted strings and comments."""

    rules = (
        Rule("flag", re.compile(r"(?:^|\s)(--?[A-Za-z][A-Za-z0-9-]*)"), FLAG),
        Rule(
            "keyword",
            re.compile(r"\b(exec|export|unset|set|if|then|else|fi|for|do|done|in|case|esac)\b"),
            KEYWORD,
        ),
        Rule("variable", re.compile(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\$[@*#?0-9]"), VARIABLE),
        Rule("string", re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\""), STRING),
        Rule("comment", re.compile(r"(?:^|\s)(#.*)$"), COMMENT),
    )


class DiffHighlighter(RuleHighlighter):
    """Unified diffs: added, removed, hunk headers and file headers."""

    rules = (
        Rule("added", re.compile(r"^\+(?!\+\+ ).*$"), ADDED),
        Rule("removed", re.compile(r"^-(?!-- ).*$"), REMOVED),
        Rule("hunk", re.compile(r"^@@.*@@.*$"), HUNK),
        Rule("header", re.compile(r"^(?:\+\+\+|---) .*$"), KEY),
    )


HIGHLIGHTERS: dict[str, type[RuleHighlighter]] = {
    "ini": IniHighlighter,
    "shell": ShellHighlighter,
    "diff": DiffHighlighter,
}


def monospace_font() -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setStyleHint(QFont.StyleHint.Monospace)
    return font


class CodeView(QPlainTextEdit):
    """A read-only, monospaced, non-wrapping text view with a syntax highlighter."""

    def __init__(self, syntax: str | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.setFont(monospace_font())
        self.highlighter: RuleHighlighter | None = (
            HIGHLIGHTERS[syntax](self.document()) if syntax is not None else None
        )

    def set_text(self, text: str) -> None:
        """Replace the text, keeping the scroll position when the text is unchanged."""
        if text != self.toPlainText():
            self.setPlainText(text)
