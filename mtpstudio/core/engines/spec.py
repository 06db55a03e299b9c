"""The LaunchSpec (argv, env, a one-line note per flag, warnings) and the builder that fills it.

``SpecBuilder.emit`` writes one option in the first spelling the probed build accepted
(``EngineBuild.accepts``); when the preferred spelling was rejected but an older or alternative
one was accepted, that one is used and its note says so. An option that cannot be expressed
for the build raises ``AdapterError`` naming the option and the build. ``engines.argv`` decides
what to emit from the Plan and the engine profile.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mtpstudio.core.engines.build import EngineBuild
from mtpstudio.core.engines.flags import FlagSpelling, Option
from mtpstudio.core.errors import AdapterError
from mtpstudio.core.plan.choices import CacheType, EngineFlavour

__all__ = [
    "DEFAULT_BINARY",
    "ENV_PREFIXES_TO_DROP",
    "QUANTIZED_CACHE_TYPES",
    "FlagNote",
    "FlagSpelling",
    "LaunchSpec",
    "Option",
    "SpecBuilder",
    "format_float",
]

DEFAULT_BINARY = Path("/usr/local/bin/llama-server")
"""Stand-in binary for documented (unprobed) planning when the plan names none."""

ENV_PREFIXES_TO_DROP = ("LLAMA_ARG_", "LLAMA_API_KEY")
"""Upstream applies ``LLAMA_ARG_*`` (and ``LLAMA_API_KEY``) before argv; launches drop them."""

QUANTIZED_CACHE_TYPES = frozenset(
    {CacheType.Q8_0, CacheType.Q5_1, CacheType.Q5_0, CacheType.Q4_1, CacheType.Q4_0,
     CacheType.IQ4_NL}
)  # fmt: skip


@dataclass(frozen=True)
class FlagNote:
    """One emitted flag: its spelling, its values, the Plan setting it comes from, and why."""

    flag: str
    values: tuple[str, ...]
    setting: str
    explanation: str

    @property
    def words(self) -> tuple[str, ...]:
        return (self.flag, *self.values)


@dataclass(frozen=True)
class LaunchSpec:
    """How to start one ``llama-server``: the command, its environment, and what it means.

    ``argv`` is derived from ``flags`` (binary first, then each flag and its values in
    order), so every argument has a one-line explanation. ``env`` holds variables to set;
    ``drop_env_prefixes`` names variables a launcher must remove from the inherited
    environment (upstream reads ``LLAMA_ARG_*`` before the command line).
    """

    flavour: EngineFlavour
    binary: Path
    flags: tuple[FlagNote, ...]
    warnings: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    drop_env_prefixes: tuple[str, ...] = ENV_PREFIXES_TO_DROP
    api_key_file: Path | None = None
    assumed_documented: bool = False
    blockers: tuple[str, ...] = ()
    """Why the engine will not run this plan as planned (empty: it will)."""
    alternatives: tuple[str, ...] = ()
    """What works instead, when there are blockers."""

    @property
    def argv(self) -> tuple[str, ...]:
        """The full command: binary path, then every flag with its values."""
        return (str(self.binary), *self.args)

    @property
    def args(self) -> tuple[str, ...]:
        return tuple(word for note in self.flags for word in note.words)

    @property
    def arg_groups(self) -> tuple[int, ...]:
        """Word count of each flag with its values (for one flag per line layouts)."""
        return tuple(len(note.words) for note in self.flags)

    def command_line(self) -> str:
        """The command as one bash-quoted line (for display and copy-paste)."""
        return shlex.join(self.argv)

    def note_for(self, flag: str) -> FlagNote | None:
        """The note of the first emitted flag spelled ``flag``, if any."""
        return next((n for n in self.flags if n.flag == flag), None)


def format_float(value: float) -> str:
    """A probability for the command line: at most 6 decimals, no trailing zeros."""
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text or "0"


class SpecBuilder:
    """Collects flags and warnings for one LaunchSpec, choosing each flag's spelling."""

    def __init__(
        self, spellings: Mapping[Option, FlagSpelling], build: EngineBuild, who: str = ""
    ) -> None:
        self._spellings = spellings
        self.build = build
        self.who = who or f"the build {build.version} at {build.binary}"
        """The build in messages (the profile's ``describe``)."""
        self.notes: list[FlagNote] = []
        self.warnings: list[str] = []
        self.blockers: list[str] = []
        self.alternatives: list[str] = []

    def spelling(self, option: Option) -> str | None:
        """The first spelling of ``option`` that the build accepts, or None."""
        entry = self._spellings.get(option)
        if entry is None:
            return None
        return next((s for s in entry.spellings if self.build.accepts(s)), None)

    def accepts(self, option: Option) -> bool:
        return self.spelling(option) is not None

    def preferred(self, option: Option) -> str:
        entry = self._spellings.get(option)
        return entry.spellings[0] if entry else option.value

    def emit(
        self,
        option: Option,
        values: Sequence[str],
        setting: str,
        explanation: str,
        *,
        required: bool = True,
        purpose: str | None = None,
    ) -> bool:
        """Append ``option`` with ``values``; False when not accepted and not required.

        Raises:
            AdapterError: when the build accepts no spelling of a required option.
        """
        flag = self.spelling(option)
        if flag is None:
            if required:
                raise self.unsupported(option, purpose or f"the plan's {setting}")
            return False
        preferred = self.preferred(option)
        if flag != preferred:
            explanation = f"{explanation} ({flag} is this build's spelling of {preferred}.)"
        self.notes.append(FlagNote(flag, tuple(values), setting, explanation))
        return True

    def unsupported(self, option: Option, purpose: str) -> AdapterError:
        entry = self._spellings.get(option)
        names = " / ".join(entry.spellings) if entry else option.value
        return AdapterError(
            f"{self.who} does not accept {names}, which is needed for {purpose}",
            hint="Change that setting in the plan, or choose a newer engine build.",
        )

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def block(self, message: str, instead: str) -> None:
        """The engine will not run the plan as planned: why, and what works instead."""
        if message not in self.blockers:
            self.blockers.append(message)
        if instead not in self.alternatives:
            self.alternatives.append(instead)
