"""The GPU kit's loads: the full-size configuration table on a built ``llama-server``, with the
GPU's memory read before, after the load and after a first prompt, into one archive.

Each load leaves its raw log and a JSON record (configuration, argv, NVML readings, times) in
a work folder that survives between commands; the archive is rewritten after every load, so a
command stopped at its time limit still returns everything it measured, and the next command
goes on with the loads not done yet. The archive's format is read by ``cuda_compare``.
"""

from __future__ import annotations

import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

import mtpstudio
from devkit.budget_check import LoadConfig
from devkit.fullsize import CARD_27B, CARD_35B, FULLSIZE
from devkit.gpu_readings import nvidia_smi_xml, nvml_reading, process_used_bytes
from devkit.kit_build import SDIST_NAME, SDIST_SHA256
from devkit.load_probe import load_log
from devkit.zero_gguf import zero_gguf_for_card

ARCHIVE_NAME = "cuda-truth.tar.gz"
ARCHIVE_TOP = "cuda-truth"
KIT_FORMAT = 1
ARCHIVE_LIMIT = 15 * 2**20
"""Under the 16 MiB a lent machine returns per file."""
PROMPT_WORDS = 700  # a first prompt longer than one 512-token ubatch: the large-batch kernels
DRY_PROMPT_WORDS = 12  # on a CPU a long prompt through the 35B card takes minutes

Say = Callable[[str], None]


@dataclass(frozen=True)
class Probe:
    """A request sent after the first prompt, with the GPU read after it: ``fill`` sends a
    prompt of ``tokens`` token ids (the cache filled that far), ``decode`` generates ``tokens``
    tokens from a short prompt (tokens/s, and draft acceptance under MTP)."""

    kind: str
    tokens: int


@dataclass(frozen=True)
class KitLoad:
    """One load of the kit: a card, a configuration, for ``--fit`` the card it emulates, the
    engine switches set in the server's environment, and the probes sent after the first
    prompt."""

    card: str
    config: LoadConfig
    emulate_mib: int | None = None  # --fit on as if the card had this many MiB
    env: tuple[tuple[str, str], ...] = ()
    probes: tuple[Probe, ...] = ()

    @property
    def slug(self) -> str:
        text = f"{self.card}-{self.config.name}".lower()
        return "".join(c if c.isalnum() else "-" for c in text).strip("-")


def _gpu(config: LoadConfig) -> LoadConfig:
    """A CPU table row as a GPU load: the server warms up (kernels load, as for a user) and
    the fit is off (on an 80 GB card it would change nothing, but it costs trial loads)."""
    return replace(config, extra=("-t", "8", "--fit", "off"))


def _fit(name: str, ctx: int, emulate_mib: int) -> KitLoad:
    config = LoadConfig(
        name,
        ctx,
        ctk="q8_0",
        ctv="q8_0",
        mtp=3,
        draft_ctk="q8_0",
        draft_ctv="q8_0",
        moe="fit",
        extra=("-t", "8"),
    )
    return KitLoad(CARD_35B, config, emulate_mib)


NO_GRAPHS = (("GGML_CUDA_DISABLE_GRAPHS", "1"),)
FILLS = (Probe("fill", 8192), Probe("fill", 32768), Probe("fill", 100_000))
DECODES = (Probe("decode", 256), Probe("decode", 256))  # the first one captures the graphs


def _growth(name: str, ctx: int, **kw: Any) -> LoadConfig:
    return _gpu(LoadConfig(name, ctx, **kw))


def growth_loads() -> tuple[KitLoad, ...]:
    """What the first GPU run could not answer about the growth after the load, the loads that
    decide the rules first: the 35B at 4k with ``-ub 512`` (the baseline on this card) and
    ``-ub 16`` (no batch reaches cuBLAS), without CUDA graphs, with every kernel loaded at
    init; MTP on with a 256-token decode twice (tokens/s and acceptance, graphs on and off);
    then 8k/32k/100k of a 128k context filled, flash attention on and off."""
    c = CARD_35B
    return (
        KitLoad(c, _growth("off 4k f16", 4096)),
        KitLoad(c, _growth("off 4k f16 ub16", 4096, ubatch=16)),
        KitLoad(c, _growth("off 4k f16 no graphs", 4096), env=NO_GRAPHS),
        KitLoad(c, _growth("off 4k f16 eager", 4096), env=(("CUDA_MODULE_LOADING", "EAGER"),)),
        KitLoad(c, _growth("on dmax3 4k f16 decode", 4096, mtp=3), probes=DECODES),
        KitLoad(
            c,
            _growth("on dmax3 4k f16 decode no graphs", 4096, mtp=3),
            env=NO_GRAPHS,
            probes=DECODES,
        ),
        KitLoad(c, _growth("off 128k q8_0 fills", 131072, ctk="q8_0", ctv="q8_0"), probes=FILLS),
        KitLoad(
            c,
            _growth("off 128k q8_0 fills fa off", 131072, ctk="q8_0", ctv="q8_0", fa="off"),
            probes=FILLS,
        ),
        KitLoad(c, _growth("on dmax3 4k f16 ub16", 4096, mtp=3, ubatch=16)),
        KitLoad(CARD_27B, _growth("on dmax3 4k f16 decode", 4096, mtp=3), probes=DECODES),
    )


def moe_cache_loads() -> tuple[KitLoad, ...]:
    """The MoE cache of upstream b11549 (the kit built from its sdist: ``build --sdist
    .cuda-kit/xllamacpp-2026.10.11549.tar.gz``): the 35B with 30 and then 40 expert layers in
    RAM and a 2 and a 6 GiB cache, MTP off and on, decoding twice (the hit rate the engine
    logs at exit, tokens/s), and a cache on a placement with nothing to cache (every expert on
    the card): the banks and slot maps against ``core.memory.moe_cache``, the speed against the
    estimate with the logged hit rate."""
    c, b = CARD_35B, "upstream-b11549"
    return (
        KitLoad(c, _growth("cache 2 GiB ncmoe30 4k", 4096, moe="n_cpu_moe", n_cpu_moe=30,
                           moe_cache_mib=2048, engine=b), probes=DECODES),
        KitLoad(c, _growth("cache 6 GiB ncmoe40 4k", 4096, moe="n_cpu_moe", n_cpu_moe=40,
                           moe_cache_mib=6144, engine=b), probes=DECODES),
        KitLoad(c, _growth("cache 2 GiB ncmoe30 on dmax3 4k", 4096, moe="n_cpu_moe",
                           n_cpu_moe=30, moe_cache_mib=2048, mtp=3, engine=b), probes=DECODES),
        KitLoad(c, _growth("cache 1 GiB all on GPU 4k", 4096, moe_cache_mib=1024, engine=b)),
        KitLoad(c, _growth("no cache ncmoe30 4k", 4096, moe="n_cpu_moe", n_cpu_moe=30,
                           engine=b), probes=DECODES),
    )  # fmt: skip


def decode_loads() -> tuple[KitLoad, ...]:
    """The decode rows the speed model's card coefficients rest on (issue 43): the 35B and the
    27B at 4k, MTP off and at draft depths 1 to 4 (zero weights: drafts never right, p-min 0:
    each step verifies depth + 1 tokens), CUDA graphs on and off, each decoding 256 tokens
    twice. ``speed_check.solve_card_coefficients`` solves the coefficients from all of them
    (least squares), the plain rows pin the per-node costs apart from the verification's."""
    out = []
    for card in (CARD_35B, CARD_27B):
        for depth in range(5):
            for graphs in (True, False):
                name = f"decode d{depth} 4k f16{'' if graphs else ' no graphs'}"
                config = _growth(name, 4096, mtp=depth)
                out.append(KitLoad(card, config, env=() if graphs else NO_GRAPHS, probes=DECODES))
    return tuple(out)


def table(name: str) -> tuple[KitLoad, ...]:
    """The loads of table ``name``: ``full`` (every full-size row on the GPU, two ``--fit``
    rows emulating a 12 and a 16 GB card), ``short`` (five of them), ``growth`` (the growth
    loads, then the fit rows, then the rest of ``full`` not loaded already), ``dry`` (two CPU
    loads of the 35B card, MTP off and on: the whole path on any machine)."""
    full = tuple(KitLoad(CARD_35B, _gpu(c)) for c in FULLSIZE[CARD_35B])
    fits = (
        _fit("fit 12 GB dmax3 32k q8_0/q8_0", 32768, 12282),
        _fit("fit 16 GB dmax3 64k q8_0/q8_0", 65536, 16380),
    )
    full += fits + tuple(KitLoad(CARD_27B, _gpu(c)) for c in FULLSIZE[CARD_27B])
    if name == "full":
        return full
    if name == "growth":
        first = growth_loads()
        taken = {x.slug for x in first}
        rest = fits + tuple(x for x in full if x not in fits and x.slug not in taken)
        return first + rest
    if name == "short":
        picks = ("off 4k f16", "on dmax2 16k q8_0/q8_0", "on dmax3 128k q8_0/q8_0")
        return tuple(x for x in full if x.card == CARD_35B and x.config.name in picks) + fits
    if name == "moe-cache":
        return moe_cache_loads()
    if name == "decode":
        return decode_loads()
    if name == "dry":
        cpu = {c.name: c for c in FULLSIZE[CARD_35B]}
        return (
            KitLoad(CARD_35B, cpu["off 4k f16"]),
            KitLoad(CARD_35B, cpu["on dmax1 4k f16"]),
        )
    raise ValueError(f"unknown table {name!r}: full, short, growth, moe-cache, decode or dry")


@dataclass
class RunPlace:
    """The work folder of a run: archive contents in ``files``, models in ``models``."""

    root: Path
    files: Path = field(init=False)
    models: Path = field(init=False)

    def __post_init__(self) -> None:
        self.files = self.root / ARCHIVE_TOP
        self.models = self.root / "models"

    def record(self, index: int, load: KitLoad) -> Path:
        return self.files / "loads" / f"{index:02d}-{load.slug}.json"

    def log(self, index: int, load: KitLoad) -> Path:
        return self.files / "loads" / f"{index:02d}-{load.slug}.log"


def write_archive(place: RunPlace, out: Path) -> Path:
    """``out/cuda-truth.tar.gz`` from the work folder, replaced atomically; logs are cut to
    their beginning and end when the archive would pass ``ARCHIVE_LIMIT``."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / ARCHIVE_NAME
    for keep_lines in (None, 4000, 800):
        tmp = out / f".{ARCHIVE_NAME}.tmp"
        with tarfile.open(tmp, "w:gz", compresslevel=9) as tar:
            for path in sorted(place.files.rglob("*")):
                if not path.is_file():
                    continue
                arcname = str(path.relative_to(place.root))
                if keep_lines is not None and path.suffix == ".log":
                    data = _cut(path.read_text(errors="replace"), keep_lines).encode()
                    info = tarfile.TarInfo(arcname)
                    info.size = len(data)
                    info.mtime = int(path.stat().st_mtime)
                    tar.addfile(info, io.BytesIO(data))
                else:
                    tar.add(path, arcname=arcname)
        os.replace(tmp, target)
        if target.stat().st_size <= ARCHIVE_LIMIT:
            break
    return target


def _cut(text: str, keep: int) -> str:
    lines = text.splitlines()
    if len(lines) <= 2 * keep:
        return text
    gap = len(lines) - 2 * keep
    return "\n".join([*lines[:keep], f"[... {gap} lines cut by the kit ...]", *lines[-keep:]])


def _manifest(place: RunPlace) -> Path:
    return place.files / "manifest.json"


def start_manifest(place: RunPlace, backend: str, table_name: str, binary: Path) -> dict[str, Any]:
    """The run's manifest (kept across calls; a call adds itself to ``calls``)."""
    path = _manifest(place)
    if path.exists():
        manifest: dict[str, Any] = json.loads(path.read_text())
    else:
        manifest = {
            "kit_format": KIT_FORMAT,
            "engine": {"sdist": SDIST_NAME, "sha256": SDIST_SHA256},
            "backend": backend,
            "table": table_name,
            "binary": binary.name,
            "host": {"machine": platform.machine(), "cpus": os.cpu_count()},
            "python": sys.version.split()[0],
            "calls": [],
            "complete": False,
        }
    manifest["calls"].append({"started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def save_manifest(place: RunPlace, manifest: dict[str, Any]) -> None:
    _manifest(place).write_text(json.dumps(manifest, indent=2) + "\n")


def machine_files(place: RunPlace, binary: Path, say: Say) -> None:
    """``nvidia-smi -q -x`` and ``mtpstudio detect --json`` beside the loads (once per run)."""
    files = place.files
    if not (files / "detect.json").exists():
        xml, problem = nvidia_smi_xml()
        if problem is None:
            (files / "nvidia-smi.xml").write_text(xml)
        else:
            (files / "nvidia-smi.txt").write_text(problem + "\n")
        say("nvidia-smi: " + (problem or "recorded"))
        env = {**os.environ, "XDG_CACHE_HOME": str(place.root / "xdg-cache")}
        package_root = str(Path(mtpstudio.__file__).resolve().parents[1])  # this very mtpstudio
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        argv = [sys.executable, "-m", "mtpstudio", "detect", "--json", "--engine", str(binary)]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=180, env=env, check=False
            )
            (files / "detect.json").write_text(done.stdout or "{}")
            if done.returncode != 0:
                (files / "detect.stderr.txt").write_text(done.stderr)
        except (OSError, subprocess.TimeoutExpired) as exc:
            (files / "detect.json").write_text("{}")
            (files / "detect.stderr.txt").write_text(f"{exc}\n")
        say("mtpstudio detect --json: recorded")


def _first_prompt(base_url: str, words: int) -> dict[str, Any]:
    """One completion of ``words`` words (longer than a ubatch on a GPU, so the large-batch
    kernels and cuBLAS run)."""
    prompt = " ".join(["memory"] * words)
    started = time.monotonic()
    try:
        r = httpx.post(
            f"{base_url}/completion",
            json={"prompt": prompt, "n_predict": 8, "cache_prompt": False},
            timeout=180.0,
        )
        ok = r.status_code == 200
        info: dict[str, Any] = {"ok": ok, "status": r.status_code}
        if ok:
            timings = r.json().get("timings", {})
            info["prompt_tokens"] = timings.get("prompt_n")
    except httpx.HTTPError as exc:
        info = {"ok": False, "error": str(exc)}
    info["seconds"] = round(time.monotonic() - started, 2)
    return info


def _probe(base_url: str, probe: Probe) -> dict[str, Any]:
    """Send ``probe``: token ids, so a fill is exactly ``tokens`` cells whatever the vocabulary;
    greedy and without end of text, so a decode always runs ``tokens`` tokens."""
    if probe.kind == "fill":
        body: dict[str, Any] = {"prompt": [1000 + i % 4096 for i in range(probe.tokens)]}
        body["n_predict"] = 4
    else:
        body = {"prompt": [1000 + i for i in range(32)], "n_predict": probe.tokens}
        body |= {"ignore_eos": True, "temperature": 0.0}
    body["cache_prompt"] = False
    started = time.monotonic()
    info: dict[str, Any] = {"kind": probe.kind, "tokens": probe.tokens}
    try:
        r = httpx.post(f"{base_url}/completion", json=body, timeout=400.0)
        info |= {"ok": r.status_code == 200, "status": r.status_code}
        if r.status_code == 200:
            info["timings"] = r.json().get("timings", {})
        else:
            info["error"] = r.text[:500]
    except httpx.HTTPError as exc:
        info |= {"ok": False, "error": str(exc)}
    info["seconds"] = round(time.monotonic() - started, 2)
    return info


def fit_target_mib(total_mib: int, emulate_mib: int, margin_mib: int = 1024) -> int:
    """``--fit-target`` that leaves a ``total_mib`` card as much as a card of ``emulate_mib``
    would have: the fit keeps ``free - target`` for itself, and the context, reserved memory
    and desktop-free state of the lent card are the same either way."""
    return max(margin_mib, total_mib - emulate_mib + margin_mib)


def _probe_line(result: dict[str, Any]) -> str:
    used = result.get("process_used_bytes")
    text = f"process {used / 2**20:,.0f} MiB" if isinstance(used, int) else "process ? MiB"
    timings = result.get("timings") or {}
    if result.get("kind") == "decode" and timings:
        text += f", {timings.get('predicted_per_second') or 0:.1f} tok/s"
        if timings.get("draft_n"):
            text += f", accepted {timings.get('draft_n_accepted')}/{timings.get('draft_n')}"
    elif timings:
        text += f", prompt {timings.get('prompt_per_second') or 0:.0f} tok/s"
    return text if result.get("ok") else f"FAILED ({result.get('error', '')[:120]})"


def run_one(
    binary: Path,
    model: Path,
    index: int,
    load: KitLoad,
    place: RunPlace,
    say: Say,
    prompt_words: int = PROMPT_WORDS,
) -> dict[str, Any]:
    """Load ``load``'s configuration, read NVML around it, send a first prompt, stop."""
    before = nvml_reading()
    args = load.config.server_args()
    record: dict[str, Any] = {"index": index, "card": load.card, "config": asdict(load.config)}
    if load.env:
        record["env"] = dict(load.env)
    if load.emulate_mib is not None:
        gpus = before.get("gpus") or []
        total_bytes = (gpus[0].get("memory") or {}).get("total_bytes") if gpus else None
        total_mib = int(total_bytes // 2**20) if isinstance(total_bytes, int) else 0
        target = fit_target_mib(total_mib, load.emulate_mib) if total_mib else 1024
        args += ["--fit", "on", "--fit-target", str(target)]
        record |= {"emulate_mib": load.emulate_mib, "fit_target_mib": target}
    readings: dict[str, Any] = {"before": before}

    def look(pid: int, base_url: str) -> None:
        readings["loaded"] = nvml_reading()
        record["first_prompt"] = _first_prompt(base_url, prompt_words)
        readings["after_prompt"] = nvml_reading()
        record["server_pid"] = pid
        record["process_used_bytes"] = {
            k: process_used_bytes(readings[k], pid) for k in ("loaded", "after_prompt")
        }
        probes = []
        for probe in load.probes:
            try:
                result = _probe(base_url, probe)
            except Exception as exc:  # a probe never ends the run
                result = {"kind": probe.kind, "tokens": probe.tokens, "ok": False}
                result["error"] = f"{type(exc).__name__}: {exc}"
            reading = nvml_reading()
            result["process_used_bytes"] = process_used_bytes(reading, pid)
            result["nvml"] = reading
            probes.append(result)
            say(f"  probe {probe.kind} {probe.tokens}: {_probe_line(result)}")
        if probes:
            record["probes"] = probes

    started = time.monotonic()
    _text, loaded = load_log(
        binary,
        model,
        args,
        place.log(index, load),
        timeout=420.0,
        while_loaded=look,
        env_extra=load.env,
    )
    record |= {
        "argv": [binary.name, "-m", model.name, *args],
        "loaded": loaded,
        "seconds": round(time.monotonic() - started, 1),
        "nvml": readings,
    }
    place.record(index, load).write_text(json.dumps(record, indent=2) + "\n")
    say(
        f"[{index + 1:02d}] {load.card} / {load.config.name}: "
        + ("loaded" if loaded else "did NOT load")
        + f" in {record['seconds']} s"
    )
    return record


def run_table(
    repo: Path,
    binary: Path,
    workdir: Path,
    out: Path,
    *,
    backend: str,
    table_name: str,
    budget_s: float,
    reserve_s: float,
    say: Say,
) -> bool:
    """Run every load of the table not done yet, while ``reserve_s`` seconds are left of
    ``budget_s``; True when the table is complete. The archive is in ``out`` after each load."""
    deadline = time.monotonic() + budget_s
    place = RunPlace(workdir)
    (place.files / "loads").mkdir(parents=True, exist_ok=True)
    place.models.mkdir(parents=True, exist_ok=True)
    manifest = start_manifest(place, backend, table_name, binary)
    build_json = binary.parent.parent / "build.json"
    if build_json.exists():
        (place.files / "build.json").write_text(build_json.read_text())
    machine_files(place, binary, say)
    write_archive(place, out)
    loads = table(table_name)
    todo = [(i, x) for i, x in enumerate(loads) if not place.record(i, x).exists()]
    say(f"{len(loads) - len(todo)} of {len(loads)} loads done before this call; {len(todo)} to go")
    for i, load in todo:
        if time.monotonic() + reserve_s > deadline:
            say(f"stopping for time: {len([t for t in todo if t[0] >= i])} loads left, run again")
            break
        model = place.models / f"{load.card}-zero.gguf"
        if not model.exists():
            say(f"writing the zero-weight {load.card} GGUF")
            zero_gguf_for_card(load.card, model)
        words = DRY_PROMPT_WORDS if table_name == "dry" else PROMPT_WORDS
        run_one(binary, model, i, load, place, say, words)
        if load.card not in {x.card for j, x in todo if j > i}:
            model.unlink(missing_ok=True)  # the card's last load: its page cache goes too
        manifest["loads_done"] = sum(place.record(j, x).exists() for j, x in enumerate(loads))
        save_manifest(place, manifest)
        write_archive(place, out)
    complete = all(place.record(i, x).exists() for i, x in enumerate(loads))
    manifest["complete"] = complete
    manifest["loads_done"] = sum(place.record(j, x).exists() for j, x in enumerate(loads))
    save_manifest(place, manifest)
    archive = write_archive(place, out)
    say(f"archive: {archive} ({archive.stat().st_size / 2**20:.2f} MiB)")
    return complete
