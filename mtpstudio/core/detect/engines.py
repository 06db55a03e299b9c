"""Find llama-server builds, identify flavour, version and backend, probe flags; cache answers."""

from __future__ import annotations

import json
import mmap
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mtpstudio.core.atomic import write_text_atomic
from mtpstudio.core.detect.models import EngineInfo, FlagProbeInfo
from mtpstudio.core.engines.build import Backend, EngineBuild, MtpSupport
from mtpstudio.core.engines.flags import RPC_FLAG, SPEC_TYPES
from mtpstudio.core.engines.mtp import mtp_support
from mtpstudio.core.engines.probe import (
    CANDIDATE_FLAGS,
    PROBE_TIMEOUT_S,
    FlagProbe,
    FlagSpec,
    ProbeOutcome,
    probe_flags,
    spec_type_specs,
    table_fingerprint,
)
from mtpstudio.core.engines.profiles import (
    PROFILES,
    era_words,
    profile_for,
    spec_type_candidates,
)
from mtpstudio.core.errors import MtpStudioError
from mtpstudio.core.paths import cache_dir
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.runner import Runner, RunResult
from mtpstudio.core.state_files import SchemaError, load_cache

ENGINE_NAMES = tuple(dict.fromkeys(n for p in PROFILES for n in p.detection.binary_names))
COMPANION_TOOLS = ("llama-fit-params", "llama-bench")
ENGINES_ENV = "MTPSTUDIO_ENGINES"
CACHE_FILE_NAME = "engine-probes.json"
CACHE_SCHEMA = 1
LIST_DEVICES_TIMEOUT_S = 15.0
DEFAULT_SYSTEM_DIRS = (Path("/usr/bin"), Path("/usr/local/bin"))
HOME_BUILD_DIRS = tuple(dict.fromkeys(d for p in PROFILES for d in p.detection.home_build_dirs))

_BUILT_WITH = re.compile(r"^built with (.+) for (.+?)\s*$", re.MULTILINE)
_DEVICE_LINE = re.compile(r"^\s+([A-Za-z][\w-]*\d+): (.+?)\s*$")
_DEVICE_MEMORY = re.compile(r"\s*\(\d+ MiB, \d+ MiB free\)$")

# Byte strings whose presence in the binary (or a ggml library beside it) tells the backend:
# ggml's log format strings ("failed to initialize " GGML_CUDA_NAME, which is "ROCm" under HIP)
# survive stripping and static linking; the library names are the DT_NEEDED entries.
BACKEND_MARKERS: dict[Backend, tuple[bytes, ...]] = {
    Backend.CUDA: (
        b"failed to initialize CUDA",
        b"libggml-cuda.so",
        b"libcudart.so",
        b"libcublas.so",
    ),
    Backend.ROCM: (
        b"failed to initialize ROCm",
        b"libggml-hip.so",
        b"libamdhip64.so",
        b"libhipblas.so",
        b"librocblas.so",
    ),
    Backend.VULKAN: (b"ggml_vulkan: Found", b"libggml-vulkan.so", b"libvulkan.so"),
    Backend.SYCL: (b"libggml-sycl.so", b"libsycl.so", b"ggml_sycl_init"),
    # strings only ggml-rpc.cpp holds (upstream's argument parser names the RPC functions in
    # every build, so those names are no sign)
    Backend.RPC: (
        b"libggml-rpc.so",
        b"The RPC backend does not have enumerated devices",
        b"ggml_backend_rpc_start_server",
    ),
    Backend.METAL: (b"ggml_metal_init", b"libggml-metal"),
}
_DEVICE_PREFIX_BACKEND = {
    "cuda": Backend.CUDA,
    "rocm": Backend.ROCM,
    "vulkan": Backend.VULKAN,
    "sycl": Backend.SYCL,
    "metal": Backend.METAL,
}
SPEC_TYPE_CANDIDATES = spec_type_candidates(SPEC_TYPES)
"""Every ``--spec-type`` value asked about: the names, and each profile's value syntax."""


@dataclass(frozen=True)
class EngineCandidate:
    """A llama-server file found somewhere, before it is identified."""

    path: Path
    found_in: str


@dataclass(frozen=True)
class VersionInfo:
    """What ``--version`` said."""

    flavour: EngineFlavour | None
    version: str | None
    build_number: int | None
    commit: str | None
    compiler: str | None
    build_target: str | None
    first_line: str | None
    ambiguous: bool = False  # 'version: N (commit)' is ik, and also older upstream builds


def parse_version(text: str) -> VersionInfo:
    """Parse ``--version`` output by each profile's pattern, in order (engines.md §1)."""
    built = _BUILT_WITH.search(text)
    compiler = built.group(1).strip() if built else None
    target = built.group(2).strip() if built else None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = next((ln for ln in lines if ln.startswith("version:")), lines[0] if lines else None)
    for profile in PROFILES:
        pattern = profile.detection.version
        if m := pattern.regex.search(text):
            build = int(m.group(pattern.build)) if pattern.build is not None else None
            return VersionInfo(
                profile.flavour,
                m.group(pattern.version),
                build,
                m.group(pattern.commit),
                compiler,
                target,
                first,
                ambiguous=pattern.ambiguous,
            )
    return VersionInfo(None, None, None, None, compiler, target, first)


def flavour_from_help(result: RunResult) -> EngineFlavour | None:
    """The flavour whose ``--help`` markers the text carries (engines.md §2: upstream's help
    has '----- common params -----' and '(env: LLAMA_ARG_' lines; ik's starts with 'usage:'
    and has a 'general:' section)."""
    text = result.stdout + result.stderr
    for profile in PROFILES:
        rule = profile.detection
        if any(marker in text for marker in rule.help_any):
            return profile.flavour
        if rule.help_markers and all(m.search(text) for m in rule.help_markers):
            return profile.flavour
    return None


def parse_list_devices(text: str, keep_memory: bool = True) -> list[str]:
    """Device lines of --list-devices, e.g. 'CUDA0: NVIDIA GeForce RTX 4070 SUPER (...)'.

    ``keep_memory=False`` drops the '(12281 MiB, 11803 MiB free)' part, which goes stale.
    """
    out: list[str] = []
    started = False
    for line in text.splitlines():
        if line.strip().startswith("Available devices"):
            started = True
            continue
        if started and (m := _DEVICE_LINE.match(line)):
            desc = m.group(2) if keep_memory else _DEVICE_MEMORY.sub("", m.group(2))
            out.append(f"{m.group(1)}: {desc}")
    return out


def backends_from_files(binary: Path) -> list[Backend]:
    """Backends compiled into ``binary`` or shipped as ggml libraries beside it."""
    found: list[Backend] = []
    files = [binary, *_ggml_libraries(binary)]
    for path in files:
        name = path.name
        for backend, markers in BACKEND_MARKERS.items():
            if backend in found:
                continue
            if any(name.startswith(m.decode()) for m in markers if m.startswith(b"lib")):
                found.append(backend)
                continue
            if _contains_any(path, markers):
                found.append(backend)
    return found


def _ggml_libraries(binary: Path) -> list[Path]:
    out: list[Path] = []
    for folder in (binary.parent, binary.parent.parent / "lib", binary.parent.parent / "lib64"):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        out.extend(
            folder / n for n in names if n.startswith(("libggml", "libllama")) and ".so" in n
        )
    return out


def _contains_any(path: Path, markers: Iterable[bytes]) -> bool:
    try:
        with path.open("rb") as handle:
            if os.fstat(handle.fileno()).st_size == 0:
                return False
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return any(data.find(m) != -1 for m in markers)
    except (OSError, ValueError):
        return False


def _companions(binary: Path) -> dict[str, str]:
    prefix = ""
    for name in ENGINE_NAMES:
        if binary.name.endswith(name):
            prefix = binary.name[: -len("llama-server")]
            break
    out: dict[str, str] = {}
    for tool in COMPANION_TOOLS:
        for candidate in (binary.parent / (prefix + tool), binary.parent / tool):
            if candidate.is_file() and os.access(candidate, os.X_OK):
                out[tool] = str(candidate)
                break
    return out


# ------------------------------------------------------------------------------------------
# finding


def search_places(
    environ: Mapping[str, str],
    extra_paths: Sequence[Path] = (),
    home: Path | None = None,
    system_dirs: Sequence[Path] = DEFAULT_SYSTEM_DIRS,
    opt_root: Path | None = Path("/opt"),
) -> list[tuple[Path, str]]:
    """Where to look, in order: added paths, $MTPSTUDIO_ENGINES, $PATH, ~/llama.cpp and
    ~/ik_llama.cpp build dirs, system bin dirs, /opt/* (and their bin/, build/bin/).

    Added paths are made absolute (the user named them); a relative $PATH entry (``.``,
    ``bin``) is no place at all: what it finds depends on the folder mtpstudio was started in.
    """
    places: list[tuple[Path, str]] = [
        (Path(p).expanduser().absolute(), "added") for p in extra_paths
    ]
    for entry in environ.get(ENGINES_ENV, "").split(os.pathsep):
        if entry.strip():
            places.append((Path(entry.strip()).expanduser(), ENGINES_ENV))
    for entry in environ.get("PATH", "").split(os.pathsep):
        if entry.strip() and Path(entry.strip()).is_absolute():
            places.append((Path(entry.strip()), "PATH"))
    home_dir = home if home is not None else _home(environ)
    if home_dir is not None:
        for rel in HOME_BUILD_DIRS:
            places.append((home_dir / rel, f"~/{rel}"))
    places.extend((d, str(d)) for d in system_dirs)
    if opt_root is not None:
        try:
            subdirs = sorted(p for p in opt_root.iterdir() if p.is_dir())
        except OSError:
            subdirs = []
        for sub in subdirs:
            for folder in (sub, sub / "bin", sub / "build" / "bin"):
                places.append((folder, str(opt_root)))
    return places


def _home(environ: Mapping[str, str]) -> Path | None:
    value = environ.get("HOME")
    return Path(value) if value else None


def find_engines(
    environ: Mapping[str, str],
    extra_paths: Sequence[Path] = (),
    home: Path | None = None,
    system_dirs: Sequence[Path] = DEFAULT_SYSTEM_DIRS,
    opt_root: Path | None = Path("/opt"),
) -> tuple[list[EngineCandidate], list[str]]:
    """Every llama-server file in the search places, once per real file; plus problems
    (added or $MTPSTUDIO_ENGINES entries that do not exist or hold no llama-server)."""
    problems: list[str] = []
    found: list[EngineCandidate] = []
    seen: set[str] = set()
    for place, label in search_places(environ, extra_paths, home, system_dirs, opt_root):
        explicit = label in ("added", ENGINES_ENV)
        if not place.is_absolute():
            problems.append(f"{label} entry {place} is not an absolute path; it is skipped")
            continue
        files: list[Path] = []
        if place.is_file():
            files = [place]
        elif place.is_dir():
            folders = [place, place / "bin", place / "build" / "bin"] if explicit else [place]
            files = [f / n for f in folders for n in ENGINE_NAMES if (f / n).is_file()]
        if explicit and not files:
            what = "does not exist" if not place.exists() else "holds no llama-server"
            problems.append(f"{label} entry {place} {what}")
        for file in files:
            try:
                real = str(file.resolve())
            except OSError:
                real = str(file)
            if real in seen:
                continue
            if not os.access(file, os.X_OK):
                if explicit:
                    problems.append(f"{file} is not executable")
                continue
            seen.add(real)
            untrusted = untrusted_place(Path(real))
            if untrusted is not None:
                problems.append(
                    f"{file} was not run: {untrusted}; mtpstudio runs engines only from "
                    "folders owned by you or root"
                )
                continue
            found.append(EngineCandidate(file, label))
    return found, problems


def untrusted_place(real: Path, uid: int | None = None) -> str | None:
    """Why the program at ``real`` (a resolved path) is not run, or None when it may be: the
    file and every folder above it must be owned by root or by ``uid`` (this user), and
    neither the file nor its folder writable by others (a sticky folder such as /tmp aside)."""
    me = os.geteuid() if uid is None else uid
    try:
        st = real.stat()
    except OSError as exc:
        return f"it cannot be looked at ({exc.strerror or exc})"
    if st.st_uid not in (0, me):
        return f"it belongs to another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and st.st_uid != me:
        return "others may change it"
    if st.st_mode & stat.S_IWOTH:
        return "anyone may change it"
    for i, folder in enumerate(real.parents):
        try:
            fst = folder.stat()
        except OSError as exc:
            return f"{folder} cannot be looked at ({exc.strerror or exc})"
        if fst.st_uid not in (0, me):
            return f"{folder} belongs to another user (uid {fst.st_uid})"
        if i == 0 and fst.st_mode & stat.S_IWOTH and not fst.st_mode & stat.S_ISVTX:
            return f"anyone may put files in {folder}"
    return None


# ------------------------------------------------------------------------------------------
# cache


CACHE_MAX_BYTES = 4 * 1024 * 1024


def _probe_cache_shape(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict) or not isinstance(data.get("engines"), dict):
        raise SchemaError("is not an engine probe cache")
    return data


def default_cache_path() -> Path:
    """engine-probes.json in mtpstudio's cache dir (``$XDG_CACHE_HOME/mtpstudio``)."""
    return cache_dir() / CACHE_FILE_NAME


@dataclass
class EngineCache:
    """Probe results by real path, valid while size and mtime stay the same.

    Not thread-safe; one detection run owns it. Saved atomically.
    """

    path: Path
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    dirty: bool = False

    @classmethod
    def load(cls, path: Path) -> EngineCache:
        """The cache at ``path``; a damaged one is set aside (and rebuilt), an older one
        ignored."""
        data = load_cache(path, "the engine probe cache", _probe_cache_shape,
                          max_bytes=CACHE_MAX_BYTES)  # fmt: skip
        if data is None or (data.get("schema"), data.get("table")) != (
            CACHE_SCHEMA,
            table_fingerprint(SPEC_TYPE_CANDIDATES),
        ):
            return cls(path)
        return cls(path, dict(data["engines"]))

    def get(self, real_path: str, size: int, mtime_ns: int) -> EngineInfo | None:
        raw = self.entries.get(real_path)
        if not isinstance(raw, dict):
            return None
        try:
            info = EngineInfo.model_validate(raw)
        except ValidationError:
            return None
        if info.size != size or info.mtime_ns != mtime_ns:
            return None
        return info

    def put(self, info: EngineInfo) -> None:
        self.entries[info.real_path] = info.model_dump(mode="json")
        self.dirty = True

    def save(self) -> None:
        table = table_fingerprint(SPEC_TYPE_CANDIDATES)
        data = {"schema": CACHE_SCHEMA, "table": table, "engines": self.entries}
        write_text_atomic(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")
        self.dirty = False


# ------------------------------------------------------------------------------------------
# identifying and probing


def identify_engine(
    candidate: EngineCandidate,
    runner: Runner,
    timeout: float = PROBE_TIMEOUT_S,
    flags: Sequence[FlagSpec] = CANDIDATE_FLAGS,
    workers: int | None = None,
) -> EngineInfo:
    """Run --version (and --help when the format is ambiguous), find the backend, probe flags.

    Never raises: what went wrong is in ``EngineInfo.problems`` (flavour None = unknown).
    """
    binary = candidate.path
    try:
        st = binary.stat()
        real = str(binary.resolve())
    except OSError as exc:
        return EngineInfo(
            path=str(binary),
            real_path=str(binary),
            found_in=candidate.found_in,
            problems=[f"cannot read {binary}: {exc.strerror or exc}"],
        )
    info = EngineInfo(
        path=str(binary),
        real_path=real,
        found_in=candidate.found_in,
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        companions=_companions(binary),
    )
    problems: list[str] = []
    result = runner([str(binary), "--version"], timeout)
    if not result.ok:
        problems.append(f"--version failed: {result.reason(timeout)}")
        return info.model_copy(update={"problems": problems})
    ver = parse_version(result.output)
    flavour = ver.flavour
    settled = not ver.ambiguous
    if flavour is None or ver.ambiguous:
        helped = flavour_from_help(runner([str(binary), "--help"], timeout))
        if helped is not None:
            flavour, settled = helped, True
        elif flavour is None:
            shown = (ver.first_line or "(nothing)")[:120]
            problems.append(f"not a llama-server this version knows: --version printed {shown!r}")
            return info.model_copy(update={"problems": problems, "version_text": ver.first_line})

    spec_specs = spec_type_specs(SPEC_TYPE_CANDIDATES)
    probes = probe_flags(binary, [*flags, *spec_specs], runner, timeout, workers)
    flag_probes, type_probes = probes[: len(flags)], probes[len(flags) :]
    accepted = [p.flag for p in flag_probes if p.accepted]
    rejected = [p.flag for p in flag_probes if not p.accepted]
    spec_types = [s.forms[0][0] for s, p in zip(spec_specs, type_probes, strict=True) if p.accepted]
    if not any(p.accepted for p in probes):
        problems.append("no flag was accepted by the --version probe; capabilities are unknown")
    timeouts = [p.flag for p in probes if p.outcome is ProbeOutcome.TIMEOUT]
    if timeouts:
        problems.append(
            f"{len(timeouts)} flag probe(s) did not finish within {timeout:g} s: "
            + ", ".join(sorted(set(timeouts))[:6])
        )
    if not settled:  # 'version: N (commit)' and an unhelpful --help: distinctive flags decide
        flavour = _flavour_from_flags(set(accepted)) or flavour

    backends = backends_from_files(binary)
    devices: list[str] = []
    listed = runner([str(binary), "--list-devices"], max(timeout, LIST_DEVICES_TIMEOUT_S))
    if listed.ok:
        devices = parse_list_devices(listed.output, keep_memory=False)
        for dev in devices:
            prefix = re.sub(r"\d+$", "", dev.split(":", 1)[0]).lower()
            backend = _DEVICE_PREFIX_BACKEND.get(prefix)
            if backend is not None and backend not in backends:
                backends.append(backend)
    backends.append(Backend.CPU)
    if Backend.RPC in backends and RPC_FLAG not in accepted:
        accepted.append(RPC_FLAG)  # never probed (flags.RPC_FLAG); the backend is in the file

    mtp = MtpSupport.UNAVAILABLE
    era = None
    if flavour is not None:
        answered = EngineBuild(
            binary,
            flavour,
            ver.version or "unknown",
            build_number=ver.build_number,
            accepted_flags=frozenset(accepted),
            spec_types=tuple(spec_types),
        )
        mtp = mtp_support(answered)
        era = era_words(profile_for(answered))
    return info.model_copy(
        update={
            "flavour": flavour,
            "version": ver.version,
            "build_number": ver.build_number,
            "commit": ver.commit,
            "compiler": ver.compiler,
            "build_target": ver.build_target,
            "version_text": ver.first_line,
            "backends": backends,
            "devices": devices,
            "accepted_flags": sorted(accepted),
            "rejected_flags": sorted(rejected),
            "flags": [_probe_info(p) for p in flag_probes],
            "spec_types": spec_types,
            "mtp": mtp,
            "era": era,
            "problems": problems,
        }
    )


def _flavour_from_flags(accepted: set[str]) -> EngineFlavour | None:
    """The one flavour whose distinctive flags the build accepted (None: none, or several)."""
    found = {
        p.flavour for p in PROFILES if any(f in accepted for f in p.detection.distinctive_flags)
    }
    return found.pop() if len(found) == 1 else None


def _probe_info(probe: FlagProbe) -> FlagProbeInfo:
    return FlagProbeInfo(
        flag=probe.flag,
        accepted=probe.accepted,
        args=list(probe.args),
        detail=probe.detail or None,
    )


@dataclass
class EngineDetection:
    """Engines found and probed, and problems met."""

    engines: list[EngineInfo] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def detect_engines(
    environ: Mapping[str, str],
    runner: Runner,
    extra_paths: Sequence[Path] = (),
    cache_path: Path | None = None,
    use_cache: bool = True,
    refresh: bool = False,
    home: Path | None = None,
    system_dirs: Sequence[Path] = DEFAULT_SYSTEM_DIRS,
    opt_root: Path | None = Path("/opt"),
    timeout: float = PROBE_TIMEOUT_S,
    workers: int | None = None,
) -> EngineDetection:
    """Find, identify and probe every llama-server; cached answers are used without running
    anything (``refresh`` re-probes and rewrites them). Only answers from a build that
    responded are cached, not hangs."""
    out = EngineDetection()
    candidates, out.problems = find_engines(environ, extra_paths, home, system_dirs, opt_root)
    cache: EngineCache | None = None
    if use_cache:
        cache = EngineCache.load(cache_path or default_cache_path())
    for cand in candidates:
        info: EngineInfo | None = None
        if cache is not None and not refresh:
            try:
                st = cand.path.stat()
                info = cache.get(str(cand.path.resolve()), st.st_size, st.st_mtime_ns)
            except OSError:
                info = None
        if info is not None:
            info = info.model_copy(
                update={
                    "path": str(cand.path),
                    "found_in": cand.found_in,
                    "from_cache": True,
                    "companions": _companions(cand.path),
                }
            )
        else:
            info = identify_engine(cand, runner, timeout, workers=workers)
            if cache is not None and _cacheable(info):
                cache.put(info)
        out.engines.append(info)
        if info.flavour is None:
            reason = "; ".join(info.problems) or "not recognised"
            out.problems.append(f"engine {info.path}: {reason}")
    if cache is not None and cache.dirty:
        try:
            cache.save()
        except MtpStudioError as exc:
            out.problems.append(f"engine cache not saved: {exc}")
    return out


def _cacheable(info: EngineInfo) -> bool:
    if info.flavour is None:
        return info.version_text is not None  # it answered, just not as an engine we know
    return not any("did not finish" in p for p in info.problems)


class EnginePathError(MtpStudioError):
    """A llama-server named by path is missing, not runnable, or not an engine mtpstudio knows."""


def probe_engine_file(
    path: Path,
    runner: Runner,
    cache_path: Path | None = None,
    use_cache: bool = True,
    timeout: float = PROBE_TIMEOUT_S,
) -> EngineInfo:
    """Identify and probe the one binary at ``path`` as detection would (same cache).

    Raises:
        EnginePathError: the file does not exist, is not an executable file, or did not
            answer as upstream llama.cpp or ik_llama.cpp.
    """
    binary = Path(path).expanduser()
    hint = "Give upstream, ik, or the path of a llama-server binary (mtpstudio detect lists them)."
    if not binary.exists():
        raise EnginePathError(f"the engine {binary} does not exist", hint=hint)
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise EnginePathError(f"the engine {binary} is not an executable file", hint=hint)
    found = detect_engines(
        {},
        runner,
        extra_paths=[binary],
        cache_path=cache_path,
        use_cache=use_cache,
        home=None,
        system_dirs=(),
        opt_root=None,
        timeout=timeout,
    )
    real = str(binary.resolve())
    info = next((e for e in found.engines if e.real_path == real), None)
    if info is None or info.flavour is None:
        why = "; ".join(info.problems) if info is not None else "; ".join(found.problems)
        raise EnginePathError(
            f"{binary} is not a llama-server mtpstudio knows ({why or 'it did not answer'})",
            hint=hint,
        )
    return info
