"""The check a unit of mtpstudio's runs before the engine starts (``ExecStartPre=``), as values.

The command is built here from a few checked values, never taken as text: the interpreter that
has mtpstudio (an absolute path), the unit's name, per GPU the MiB the engine needs and the MiB
the desktop takes at login, what to do when they are short (``refuse``, ``warn`` or ``fit``),
the engine's size and modification time when the plan probed it, and the flags it passes (to
ask a changed build about). ``mtpstudio prestart`` (``core/service/prestart.py``) reads the same
words back.

With ``fit`` the unit's placement (``--fit off -ngl 999 --n-cpu-moe 20``) is not in
``ExecStart=`` itself but in ``$MTPSTUDIO_PLACEMENT`` (``Environment=``), and the check, when the
VRAM is short, writes the engine's fit (``--fit on --fit-target 2048``) into the runtime
folder's ``placement.env`` (``EnvironmentFile=``, read after ``ExecStartPre=`` ends), which
overrides it for this start. Both are plain words (letters, digits, ``.,:+=-``): nothing a
shell, systemd's quoting or a specifier reads differently.

The same values give the comparison after the load (``ExecStartPost=``, ``mtpstudio
poststart``): the address the engine answers ``/health`` on (host and port) and, per device, the
MiB of buffers the plan says the engine's load log shows. Standard library only: the root
helper imports it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mtpstudio.helper.safefs import Refused
from mtpstudio.helper.shape_common import list_value, only_keys

ON_SHORT = ("refuse", "warn", "fit")
PLACEMENT_VAR = "MTPSTUDIO_PLACEMENT"
"""The variable the unit's placement words are in when the check may swap them."""
PLACEMENT_FILE = "placement.env"
"""The file in the unit's runtime folder the check writes the engine's fit into."""
PLAIN_WORD = re.compile(r"^[A-Za-z0-9.,:+=-]{1,64}$")
MAX_PLACEMENT = 32
DEVICE_ID = re.compile(r"^(CUDA|ROCm|Vulkan)[0-9]{1,2}$")
LOAD_DEVICE = re.compile(r"^((CUDA|ROCm|Vulkan)[0-9]{1,2}|CPU)$")
HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")
FLAG = re.compile(r"^--?[a-z0-9][a-z0-9-]{0,63}$")
MAX_MIB = 64 * 1024 * 1024
MAX_DEVICES = 16
MAX_FLAGS = 128
MAX_PATH = 4096


@dataclass(frozen=True)
class PrestartShape:
    """The values ``ExecStartPre=`` is built from.

    Attributes:
        python: the interpreter mtpstudio is installed for (absolute).
        unit: the unit's name (``NAME.service``), for the journal lines.
        needs: per GPU (device id, MiB the engine needs, MiB the desktop takes at login).
        on_short: ``refuse`` (the unit does not start) or ``warn`` (it starts and says so).
        engine_size: the engine binary's size when the plan probed it (None: not probed).
        engine_mtime_ns: its modification time then.
        flags: the flags the unit passes the engine (a changed build is asked about them).
        host: the address the engine listens on (the comparison after the load asks it).
        port: its port (None: no comparison after the load).
        loads: per device (id or ``CPU``) the MiB of buffers the plan says the load log shows.
        placement: the unit's placement words (``on_short == "fit"``: they live in
            ``$MTPSTUDIO_PLACEMENT``; empty: in ``ExecStart=`` itself).
        fallback: the engine's fit that replaces them when the VRAM is short.
    """

    python: str
    unit: str
    needs: tuple[tuple[str, int, int], ...]
    on_short: str = "refuse"
    engine_size: int | None = None
    engine_mtime_ns: int | None = None
    flags: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int | None = None
    loads: tuple[tuple[str, int], ...] = ()
    placement: tuple[str, ...] = ()
    fallback: tuple[str, ...] = ()

    @property
    def swaps_placement(self) -> bool:
        """The check may start the engine with its fit instead of the unit's placement."""
        return self.on_short == "fit" and bool(self.fallback)

    @property
    def compares_load(self) -> bool:
        """The unit compares its load with the plan afterwards (``ExecStartPost=``)."""
        return self.port is not None and bool(self.loads)

    def post_argv(self) -> tuple[str, ...]:
        """The comparison after the load (``ExecStartPost=``; empty: none)."""
        if not self.compares_load:
            return ()
        words = [self.python, "-m", "mtpstudio", "poststart", "--unit", self.unit]
        words += ["--host", self.host, "--port", str(self.port)]
        for device, mib in self.loads:
            words += ["--load", f"{device}={mib}"]
        return tuple(words)

    def argv(self, engine: str, *, script: bool = False) -> tuple[str, ...]:
        """The command (``engine``: the unit's engine binary, its ``ExecStart=`` program;
        ``script``: the launch script's, which prints the engine's fit on its output)."""
        words = [self.python, "-m", "mtpstudio", "prestart", "--unit", self.unit]
        words += ["--on-short", self.on_short]
        if self.swaps_placement:
            words += [f"--fallback={word}" for word in self.fallback]  # one word each
            if script:
                words.append("--print-fallback")
        for device, engine_mib, desktop_mib in self.needs:
            words += ["--need", f"{device}={engine_mib},{desktop_mib}"]
        words += ["--engine", engine]
        if self.engine_size is not None and self.engine_mtime_ns is not None:
            words += ["--engine-size", str(self.engine_size)]
            words += ["--engine-mtime-ns", str(self.engine_mtime_ns)]
        words += [f"--flag={flag}" for flag in self.flags]  # one word: a flag's own dash
        return tuple(words)

    def params(self) -> dict[str, Any]:
        return {
            "python": self.python,
            "needs": [list(n) for n in self.needs],
            "on_short": self.on_short,
            "engine_size": self.engine_size,
            "engine_mtime_ns": self.engine_mtime_ns,
            "flags": list(self.flags),
            "host": self.host,
            "port": self.port,
            "loads": [list(n) for n in self.loads],
            "placement": list(self.placement),
            "fallback": list(self.fallback),
        }


def _whole(value: Any, what: str, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
        raise Refused(f"{what} must be a whole number from 0 to {high}")
    return value


def _python(value: Any) -> str:
    if (
        not isinstance(value, str)
        or not value.startswith("/")
        or len(value) > MAX_PATH
        or any(ord(c) < 32 or c in "\\\"'$%;`" or ord(c) == 127 for c in value)
        or "/../" in value
        or value.endswith("/..")
    ):
        raise Refused("the check's interpreter must be an absolute path of plain characters")
    return value


def prestart_from_params(payload: Any, unit: str) -> PrestartShape:
    """The check a caller asks for, every value checked; Refused otherwise."""
    if not isinstance(payload, Mapping):
        raise Refused("the check before the start must be an object")
    allowed = {"python", "needs", "on_short", "engine_size", "engine_mtime_ns", "flags", "host",
               "port", "loads", "placement", "fallback"}  # fmt: skip
    only_keys(payload, allowed, "the check before the start")
    needs_in = list_value(payload.get("needs"), "the check's devices", MAX_DEVICES)
    if not needs_in:
        raise Refused(f"the check needs 1 to {MAX_DEVICES} devices")
    needs = []
    for entry in needs_in:
        if not isinstance(entry, list) or len(entry) != 3:
            raise Refused("each device of the check is [id, engine MiB, desktop MiB]")
        device, engine_mib, desktop_mib = entry
        if not isinstance(device, str) or not DEVICE_ID.match(device):
            raise Refused("a device of the check must be an id such as CUDA0")
        needs.append(
            (
                device,
                _whole(engine_mib, "the engine's MiB", MAX_MIB),
                _whole(desktop_mib, "the desktop's MiB", MAX_MIB),
            )
        )
    on_short = payload.get("on_short", "refuse")
    if on_short not in ON_SHORT:
        raise Refused("the check's on_short must be refuse, warn or fit")
    size, mtime = payload.get("engine_size"), payload.get("engine_mtime_ns")
    if (size is None) != (mtime is None):
        raise Refused("the engine's size and modification time come together")
    flags_in = list_value(payload.get("flags", []), "the check's flags", MAX_FLAGS)
    flags = []
    for flag in flags_in:
        if not isinstance(flag, str) or not FLAG.match(flag):
            raise Refused("a flag of the check must look like --name")
        flags.append(flag)
    host = payload.get("host", "127.0.0.1")
    if not isinstance(host, str) or not HOST.match(host):
        raise Refused("the engine's address must be a host name or an IP address")
    port = payload.get("port")
    loads = _loads(payload.get("loads", []))
    placement = _plain_words(payload.get("placement", []), "the unit's placement")
    fallback = _plain_words(payload.get("fallback", []), "the engine's fit")
    if (placement or fallback) and on_short != "fit":
        raise Refused("a placement and the engine's fit instead come only with on_short fit")
    if placement and not fallback:
        raise Refused("the unit's placement comes with the engine's fit that may replace it")
    return PrestartShape(
        python=_python(payload.get("python")),
        unit=unit,
        needs=tuple(needs),
        on_short=str(on_short),
        engine_size=None if size is None else _whole(size, "the engine's size", 2**62),
        engine_mtime_ns=None if mtime is None else _whole(mtime, "its time", 2**63 - 1),
        flags=tuple(flags),
        host=host,
        port=None if port is None else _port(port),
        loads=loads,
        placement=placement,
        fallback=fallback,
    )


def _plain_words(value: Any, what: str) -> tuple[str, ...]:
    words = list_value(value, what, MAX_PLACEMENT)
    for word in words:
        if not isinstance(word, str) or not PLAIN_WORD.match(word):
            raise Refused(f"a word of {what} must be letters, digits and .,:+=- only")
    return tuple(words)


def _port(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        raise Refused("the engine's port must be a whole number from 1 to 65535")
    return value


def _loads(value: Any) -> tuple[tuple[str, int], ...]:
    out = []
    for entry in list_value(value, "the load's devices", MAX_DEVICES + 1):
        if not isinstance(entry, list) or len(entry) != 2:
            raise Refused("each device of the load is [id, MiB]")
        device, mib = entry
        if not isinstance(device, str) or not LOAD_DEVICE.match(device):
            raise Refused("a device of the load must be an id such as CUDA0, or CPU")
        out.append((device, _whole(mib, "the load's MiB", MAX_MIB)))
    if len({d for d, _ in out}) != len(out):
        raise Refused("a device of the load is named twice")
    return tuple(out)


def poststart_from_argv(words: Sequence[str], shape: PrestartShape) -> PrestartShape:
    """An installed unit's ``ExecStartPost=`` read back into ``shape`` (the unit's check): it
    must be exactly what ``post_argv`` builds; Refused otherwise."""
    head = list(words[:6])
    if len(words) < 10 or head != [shape.python, "-m", "mtpstudio", "poststart", "--unit",
                                   shape.unit]:  # fmt: skip
        raise Refused("the unit's ExecStartPost= is not mtpstudio's comparison after the load")
    rest = list(words[6:])
    if rest[0] != "--host" or rest[2] != "--port" or not rest[3].isdigit():
        raise Refused("the unit's ExecStartPost= does not name the engine's address")
    loads: list[list[Any]] = []
    pairs = rest[4:]
    if len(pairs) % 2:
        raise Refused("the unit's ExecStartPost= ends in a flag without its value")
    for key, value in zip(pairs[::2], pairs[1::2], strict=True):
        device, _, mib = value.partition("=")
        if key != "--load" or not mib.isdigit():
            raise Refused(f"the unit's ExecStartPost= has {key!r}, which it does not take")
        loads.append([device, int(mib)])
    payload = {**shape.params(), "host": rest[1], "port": int(rest[3]), "loads": loads}
    post = prestart_from_params(payload, shape.unit)
    if post.post_argv() != tuple(words):
        raise Refused("the unit's ExecStartPost= is not in the order mtpstudio writes it")
    return post


def prestart_from_argv(
    words: Sequence[str], unit: str, engine: str, placement: Sequence[str] = ()
) -> PrestartShape:
    """An installed unit's ``ExecStartPre=`` read back (it must be exactly what ``argv``
    builds from its values; ``placement``: the words of the unit's ``$MTPSTUDIO_PLACEMENT``);
    Refused otherwise."""
    head = list(words[:6])
    if len(words) < 8 or head[1:] != ["-m", "mtpstudio", "prestart", "--unit", unit]:
        raise Refused("the unit's ExecStartPre= is not mtpstudio's check")
    payload: dict[str, Any] = {"python": words[0], "needs": [], "flags": [], "fallback": [],
                               "placement": list(placement)}  # fmt: skip
    rest = list(words[6:])
    script = False
    while rest:
        if rest[0] == "--print-fallback":
            rest.pop(0)
            script = True
            continue
        if rest[0].startswith("--flag="):
            payload["flags"].append(rest.pop(0).removeprefix("--flag="))
            continue
        if rest[0].startswith("--fallback="):
            payload["fallback"].append(rest.pop(0).removeprefix("--fallback="))
            continue
        if len(rest) < 2:
            raise Refused("the unit's ExecStartPre= ends in a flag without its value")
        key, value = rest[0], rest[1]
        rest = rest[2:]
        if key == "--on-short":
            payload["on_short"] = value
        elif key == "--need":
            device, _, amounts = value.partition("=")
            engine_mib, _, desktop_mib = amounts.partition(",")
            if not (engine_mib.isdigit() and desktop_mib.isdigit()):
                raise Refused("the unit's ExecStartPre= names a device without its MiB")
            payload["needs"].append([device, int(engine_mib), int(desktop_mib)])
        elif key == "--engine":
            if value != engine:
                raise Refused("the unit's check names another engine than its ExecStart=")
        elif key in ("--engine-size", "--engine-mtime-ns"):
            if not value.isdigit():
                raise Refused("the unit's ExecStartPre= has an engine stamp that is not a number")
            payload["engine_size" if key == "--engine-size" else "engine_mtime_ns"] = int(value)
        else:
            raise Refused(f"the unit's ExecStartPre= has {key!r}, which the check does not take")
    shape = prestart_from_params(payload, unit)
    if shape.argv(engine, script=script) != tuple(words):
        raise Refused("the unit's ExecStartPre= is not in the order mtpstudio writes it")
    return shape
