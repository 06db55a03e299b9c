"""An engine profile: what mtpstudio knows about one flavour (or era) of llama-server, as data.

A profile holds the flag spellings and value syntaxes, how MTP and a draft model are asked for,
how the engine's fit and load modes are spelled, the memory facts, the benchmark endpoint, the
patterns that recognise a build, and the display name. The argv builder (``engines.argv``), the
MTP decision (``engines.mtp``), detection, the budget and the benchmark read these fields; none
of them asks which flavour a build is. A new flavour, or a new era of one with other spellings,
is one module under ``engines/profiles/`` registered in ``engines.registry``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from mtpstudio.core.engines.build import EngineBuild, MtpSupport
from mtpstudio.core.engines.engine_facts import EngineMemoryFacts
from mtpstudio.core.engines.flags import FlagSpelling, Option
from mtpstudio.core.engines.speed_facts import UPSTREAM_SPEED, EngineSpeedFacts
from mtpstudio.core.plan.choices import EngineFlavour

__all__ = [
    "BenchProtocol",
    "DetectionRule",
    "DraftRule",
    "EngineProfile",
    "FitRule",
    "MtpRequest",
    "MtpRule",
    "SpecTypeParams",
    "VersionPattern",
]


class MtpRequest(StrEnum):
    """How a build is asked to draft with the model's own MTP layer."""

    SPEC_TYPE = "spec-type"  # --spec-type draft-mtp, depth and p-min as their own flags
    SWITCH = "switch"  # -mtp, depth and p-min as their own flags
    SPEC_TYPE_PARAMS = "spec-type-params"  # --spec-type mtp:n_max=3,p_min=0.75 (one value)


@dataclass(frozen=True)
class SpecTypeParams:
    """A ``--spec-type NAME:key=value,…`` value syntax: the name and the keys it takes.

    ``probe`` is a complete value a build of this syntax accepts; detection asks the build
    about it like any flag (``--spec-type <probe> --version``), so the build is described by
    what it answered.
    """

    name: str
    n_max: str = "n_max"
    n_min: str | None = None
    p_min: str = "p_min"
    probe_depth: int = 1
    probe_p_min: str = "0.0"

    @property
    def probe(self) -> str:
        return f"{self.name}:{self.n_max}={self.probe_depth},{self.p_min}={self.probe_p_min}"

    def value(self, n_max: int, p_min: str, n_min: int = 0) -> str:
        """``mtp:n_max=3,p_min=0.75`` (``n_min`` only when given and the syntax has it)."""
        parts = [f"{self.n_max}={n_max}"]
        if self.n_min is not None and n_min > 0:
            parts.append(f"{self.n_min}={n_min}")
        parts.append(f"{self.p_min}={p_min}")
        return f"{self.name}:" + ",".join(parts)


@dataclass(frozen=True)
class MtpRule:
    """How MTP is asked for, which models it runs, and what to say when it cannot.

    Attributes:
        request: the kind of request (a ``--spec-type`` value, a switch, or a value syntax).
        spec_type: the ``--spec-type`` value for ``SPEC_TYPE`` (``draft-mtp``).
        params: the value syntax for ``SPEC_TYPE_PARAMS``.
        documented: what the documented snapshot (engines.md §3) answers for MTP.
        note: the explanation of the MTP flag in the command line.
        left_out_for_other_architectures: explicit MTP on a model whose architecture the engine
            does not run is left out of the command and blocks the plan (else it is emitted
            and the engine loads without drafting).
        unknown_model_warning: said when MTP is on and the model's header is unknown.
        unloadable_with_nextn: architectures whose GGUF with an MTP block this engine cannot
            load at all, with the sentence that says why.
        instead: what works where this engine cannot load the model's GGUF with its MTP block.
        other_architectures_instead: what works where it loads the model but cannot run its MTP.
    """

    request: MtpRequest
    spec_type: str | None = None
    params: SpecTypeParams | None = None
    documented: MtpSupport = MtpSupport.AVAILABLE
    note: str = "Draft tokens with the model's own MTP (nextn) layer."
    left_out_for_other_architectures: bool = False
    unknown_model_warning: str | None = None
    unloadable_with_nextn: Mapping[str, str] = field(default_factory=dict)
    instead: str = ""
    other_architectures_instead: str = ""

    @property
    def words(self) -> str:
        """How the request reads on a command line, for people (badges, reasons)."""
        if self.request is MtpRequest.SWITCH:
            return "-mtp"
        if self.params is not None:
            return f"--spec-type {self.params.name}:…"
        return f"--spec-type {self.spec_type}"


@dataclass(frozen=True)
class DraftRule:
    """A separate draft model: its flags and how drafting with it is switched on."""

    spellings: Mapping[Option, FlagSpelling]
    spec_type: str | None = None
    """The ``--spec-type`` value that turns drafting with ``-md`` on (None: ``-md`` alone)."""
    params: SpecTypeParams | None = None
    """A value syntax that carries depth and p-min (then they are not separate flags)."""


@dataclass(frozen=True)
class FitRule:
    """How the engine's own fit is spelled.

    Attributes:
        on_values: the values after the fit flag to turn it on (``("on",)``; ``()``: a switch).
        off_values: the values that turn it off (None: it is off unless asked for).
        margin: the option that sets the VRAM left free per device.
        note: the explanation of the fit flag.
        zero_margin_reads_as: a margin of 0 is read as this many MiB (1 MiB is used instead).
        counts_mtp_context: the fit counts the MTP draft context (else a warning says to leave
            a larger margin).
    """

    on_values: tuple[str, ...]
    off_values: tuple[str, ...] | None
    margin: Option
    note: str
    zero_margin_reads_as: int | None = None
    counts_mtp_context: bool = True


@dataclass(frozen=True)
class SplitRule:
    """How the engine splits a model over several devices (``-sm``, ``-ts``, the fit's margins).

    Attributes:
        modes: how ``-sm`` spells each of the plan's split modes (None: the engine has no such
            mode; ik has ``graph`` and ``attn`` of its own instead of ``row``).
        per_device_margins: the fit margin takes one value per device (upstream's
            ``--fit-target MiB0,MiB1,...``); else one value for every device.
        row_devices: the device kinds a row split works on (the others refuse split buffers).
    """

    modes: tuple[tuple[str, str | None], ...]
    per_device_margins: bool
    row_devices: tuple[str, ...] = ("CUDA",)

    def spelling(self, mode: str) -> str | None:
        """The ``-sm`` value for the plan's ``mode`` (None: this engine has none)."""
        return dict(self.modes).get(mode)


@dataclass(frozen=True)
class BenchProtocol:
    """The completion endpoint that reports draft counts, and its token-count field."""

    endpoint: str
    n_predict_field: str
    drafting_off_remedy: tuple[str, Mapping[str, object]] | None = None
    """A Plan change to offer when a run asked for drafting and got none (label, changes)."""


@dataclass(frozen=True)
class VersionPattern:
    """A ``--version`` line format: the regex and which groups hold version, build, commit."""

    regex: re.Pattern[str]
    version: int
    build: int | None
    commit: int
    ambiguous: bool = False
    """Other flavours print the same format (then ``--help`` or distinctive flags decide)."""


@dataclass(frozen=True)
class DetectionRule:
    """What recognises a build of this flavour: ``--version``, ``--help`` and flags only it has."""

    version: VersionPattern
    help_markers: tuple[re.Pattern[str], ...]
    """All must match the ``--help`` text."""
    help_any: tuple[str, ...] = ()
    """Any one of these substrings in the ``--help`` text is enough."""
    distinctive_flags: tuple[str, ...] = ()
    binary_names: tuple[str, ...] = ("llama-server",)
    """File names its server is installed under (searched for in every search place)."""
    home_build_dirs: tuple[str, ...] = ()
    """Build folders below the home folder where people build it (``llama.cpp/build/bin``)."""


@dataclass(frozen=True)
class EngineProfile:
    """One engine flavour (or era of it) as data; see the module docstring.

    ``era_marker`` names a ``--spec-type`` value a build must have answered for this era's
    profile to describe it (None: the flavour's base era, used when no newer one matches).
    The fields without their own note are described in the module docstring.
    """

    flavour: EngineFlavour
    name: str
    era: str
    spellings: Mapping[Option, FlagSpelling]
    documented_flags: frozenset[str]
    documented_spec_types: tuple[str, ...]
    memory: EngineMemoryFacts
    mtp: MtpRule
    draft: DraftRule
    fit: FitRule
    bench: BenchProtocol
    detection: DetectionRule
    split: SplitRule = SplitRule((("layer", "layer"), ("row", "row")), per_device_margins=True)
    """How it splits a model over several devices (upstream's rules unless said)."""
    expert_tensors: str = r"ffn_(up|down|gate|gate_up)_exps"
    """The routed-expert tensor names as the engine's own --n-cpu-moe pattern writes them."""
    launch_verbosity: str | None = None
    """Log verbosity that prints the buffer sizes mtpstudio compares (None: the default does)."""
    flash_attn_auto_note: str | None = None
    """The note for ``-fa auto`` when the engine reads it as something fixed."""
    flash_attn_auto_may_turn_off: bool = False
    """``-fa auto`` may turn flash attention off on a device (bad with a quantized V cache)."""
    era_marker: str | None = None
    min_build: int | None = None
    """An era told by the build number its ``--version`` names (builds from this one on);
    a build that names no number is never of it."""
    speculative_max_slots: int | None = None
    """The most server slots the engine drafts with (MTP or a draft model); it refuses to
    start with more (None: no limit)."""
    era_flag: str | None = None
    """An era told by a flag its parser accepts (``--moe-cache-mib``, b11549); a build whose
    probe rejected it, or never asked, is not of it."""
    default_port: int = 8080
    speed: EngineSpeedFacts = UPSTREAM_SPEED
    """How it decodes, for the speed estimate (``engines.speed_facts``)."""
    """The port the server listens on when started without ``--port``."""
    rpc_protocol: tuple[int, int, int] = (7, 0, 0)
    """The RPC protocol its RPC backend speaks (``RPC_PROTO_*_VERSION``)."""

    def describe(self, build: EngineBuild) -> str:
        """A short name for a build in messages: 'the upstream llama.cpp build 0.6 at /x'."""
        return f"the {self.name} build {build.version} at {build.binary}"

    def matches(self, build: EngineBuild) -> bool:
        """True when ``build`` is of this flavour and answered this era's marker."""
        if build.flavour is not self.flavour:
            return False
        if self.min_build is not None and (
            build.build_number is None or build.build_number < self.min_build
        ):
            return False
        if self.era_flag is not None and self.era_flag not in build.accepted_flags:
            return False
        return self.era_marker is None or self.era_marker in build.spec_types

    @property
    def documented_mtp(self) -> MtpSupport:
        return self.mtp.documented
