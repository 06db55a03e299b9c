"""Benchmark: the bench harness's own overhead, client-side decode tok/s vs the server's figure.

The client times every streamed token; its decode rate is (tokens - 1) / (last - first token).
The server reports ``timings.predicted_per_second``. Within 2 % means the harness (HTTP, SSE
parsing, Python) does not slow what it measures. Starts an upstream llama-server on a small
generated model (sized to decode at tens to hundreds of tok/s on a CPU, as real models do on a
GPU; at thousands of tok/s tokens reach the client in bursts and per-token timing is
meaningless) unless ``--url`` names a running server.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from mtpstudio.core.bench.client import BenchClient
from mtpstudio.core.bench.prompts import WARMUP, load_prompts
from mtpstudio.core.bench.target import BenchTarget
from mtpstudio.core.plan.choices import EngineFlavour


def measure(target: BenchTarget, n_predict: int, rounds: int) -> list[tuple[str, float, float]]:
    prompts = load_prompts()
    rows = []
    with BenchClient(target) as client:
        client.complete(WARMUP.category, WARMUP.prompt, n_predict)
        for i in range(rounds):
            p = prompts[i % len(prompts)]
            s = client.complete(p.category, p.prompt, n_predict)
            if s.client_decode_tps is None:
                continue
            rows.append((p.category, s.client_decode_tps, s.predicted_per_second))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", help="a running server (default: start one on a tiny model)")
    parser.add_argument("--engine-flavour", choices=["upstream", "ik"], default="upstream")
    parser.add_argument("--n-predict", type=int, default=192)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--n-embd",
        type=int,
        default=768,
        help="width of the generated model (default 768: a "
        "decode speed of tens to hundreds of tok/s on a CPU, like real models on a GPU)",
    )
    parser.add_argument("--n-layer", type=int, default=8)
    args = parser.parse_args()

    server = None
    if args.url:
        target = BenchTarget(args.url, EngineFlavour(args.engine_flavour))
    else:
        from support.servers import engine_binary, start_server
        from support.tiny_models import make_model

        tmp = Path(tempfile.mkdtemp(prefix="mtpstudio-overhead-"))
        model = make_model("dense", tmp / "dense.gguf", dtype="q8_0", n_embd=args.n_embd,
                           n_layer=args.n_layer, n_head=args.n_embd // 64,
                           n_head_kv=max(1, args.n_embd // 256), n_ff=4 * args.n_embd)  # fmt: skip
        server = start_server(engine_binary(args.engine_flavour), model, log_dir=tmp,
                              ctx_size=4096, engine=args.engine_flavour)  # fmt: skip
        target = BenchTarget(server.base_url, EngineFlavour(args.engine_flavour))
    try:
        rows = measure(target, args.n_predict, args.rounds)
    finally:
        if server is not None:
            server.stop()
    print(f"harness overhead · {target.flavour.value} {target.base_url} · "
          f"n_predict {args.n_predict} · {len(rows)} requests")  # fmt: skip
    print(f"{'category':<18} {'client tok/s':>13} {'server tok/s':>13} {'diff':>8}")
    diffs = []
    for category, client_tps, server_tps in rows:
        diff = (client_tps - server_tps) / server_tps * 100.0
        diffs.append(diff)
        print(f"{category:<18} {client_tps:>13.2f} {server_tps:>13.2f} {diff:>+7.2f}%")
    if not diffs:
        print("no usable requests")
        return 1
    med = statistics.median(diffs)
    client_med = statistics.median(r[1] for r in rows)
    server_med = statistics.median(r[2] for r in rows)
    verdict = "within" if abs(med) <= 2.0 else "OUTSIDE"
    print(f"median: client {client_med:.2f} tok/s vs server {server_med:.2f} tok/s; "
          f"median difference {med:+.2f}% ({verdict} the 2% target)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
