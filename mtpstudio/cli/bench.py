"""``mtpstudio bench``: the nine-category benchmark, A/B, gate, concurrency, history."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtpstudio.core.bench.choices import EXPORT_FORMATS, PRESET_NAMES
from mtpstudio.core.errors import BenchError
from mtpstudio.core.plan.choices import EngineFlavour
from mtpstudio.core.usecases.files import write_text_atomic

if TYPE_CHECKING:  # the command's body imports what it runs: registering it stays light
    from mtpstudio.core.bench.ab import ABReport, ABVariant, TargetOpener
    from mtpstudio.core.bench.client import CompletionSample
    from mtpstudio.core.bench.concurrency import ConcurrencyReport
    from mtpstudio.core.bench.gate import GateReport
    from mtpstudio.core.bench.history import BenchHistory
    from mtpstudio.core.bench.prompts import BenchPrompt
    from mtpstudio.core.bench.results import BenchReport, BenchSettings
    from mtpstudio.core.bench.target import BenchProgress, BenchTarget, ServerLauncher
    from mtpstudio.core.plan.schema import Plan

# The launcher `bench --plan` uses; None: the use case's PlanServerLauncher (made when needed).
DEFAULT_LAUNCHER: ServerLauncher | None = None


def _launcher(args: argparse.Namespace) -> ServerLauncher:
    if args.launcher is not None:
        return args.launcher  # type: ignore[no-any-return]
    if DEFAULT_LAUNCHER is not None:
        return DEFAULT_LAUNCHER
    from mtpstudio.core.usecases.plan_server import PlanServerLauncher

    args.launcher = PlanServerLauncher()  # one per command: it keeps what its servers said
    return args.launcher  # type: ignore[no-any-return]


def register(sub: Any) -> None:
    """Add ``bench`` (with ``bench history`` and ``bench show``) to the main subparsers."""
    p: argparse.ArgumentParser = sub.add_parser(
        "bench",
        help="benchmark a server: nine categories, draft acceptance, A/B, correctness gate",
        description="Benchmark llama-server the way the community does (nine prompt categories, "
        "192 tokens, temperature 0, prompt cache off, one warm-up discarded). Give a running "
        "server with --url, or a plan with --plan to launch one. Every run is kept in the "
        "history (see `mtpstudio bench history`).",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--url", help="a running server, http://HOST:PORT")
    where.add_argument("--plan", type=Path, help="launch this plan and benchmark it")
    p.add_argument(
        "--engine-flavour",
        choices=[f.value for f in EngineFlavour],
        default=EngineFlavour.UPSTREAM.value,
        help="the engine behind --url (default: upstream; picks the endpoint with draft counts)",
    )
    vs = p.add_mutually_exclusive_group()
    vs.add_argument("--vs", type=Path, metavar="PLAN2", help="A/B against this plan")
    vs.add_argument("--vs-url", metavar="URL2", help="A/B against this running server")
    vs.add_argument(
        "--preset",
        choices=sorted(PRESET_NAMES),
        help="A/B preset on --plan: 'mtp' (MTP on vs off), 'graphs' (CUDA graphs control)",
    )
    p.add_argument(
        "--vs-engine-flavour",
        choices=[f.value for f in EngineFlavour],
        help="the engine behind --vs-url (default: as --engine-flavour)",
    )
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="repeats, medians (1)")
    p.add_argument(
        "--concurrency", type=int, default=1, metavar="N", help="also run N parallel clients"
    )
    p.add_argument(
        "--gate",
        action="store_true",
        help="correctness gate: text with drafting on must equal text with drafting off "
        "(--url needs --vs-url as the drafting-off server)",
    )
    p.add_argument("--json", type=Path, metavar="OUT", help="also write everything as JSON")
    p.add_argument(
        "--n-predict", type=int, default=192, metavar="N", help="tokens per request (192)"
    )
    p.add_argument("--categories", metavar="A,B", help="only these categories (comma-separated)")
    p.add_argument("--prompts", type=Path, metavar="JSON", help="use these prompts instead")
    p.add_argument(
        "--expect-drafts",
        action="store_true",
        help="the --url server was started with MTP or a draft model (flag a run without drafts)",
    )
    key = p.add_mutually_exclusive_group()
    key.add_argument(
        "--api-key-file",
        type=Path,
        metavar="FILE",
        help="file holding the API key of the --url server(s) (one line, mode 0600)",
    )
    key.add_argument(
        "--api-key",
        metavar="-",
        help="`-` reads the API key of the --url server(s) from standard input (a key written "
        "here would show in `ps` and the shell history)",
    )
    p.add_argument(
        "--together",
        action="store_true",
        help="with --plan: keep both A/B servers up at once and interleave per category "
        "(default: one server at a time, rounds alternating A B / B A)",
    )
    p.add_argument("--no-history", action="store_true", help="do not store this run")
    p.set_defaults(func=run_bench_command, launcher=None)

    inner = p.add_subparsers(dest="bench_command", metavar="{history,show}")
    h = inner.add_parser("history", help="list the stored benchmark runs")
    h.add_argument("--json", action="store_true", help="print JSON")
    h.set_defaults(func=run_history_command)
    s = inner.add_parser("show", help="print one stored run")
    s.add_argument("id", type=int, help="the run id (from `bench history`)")
    s.add_argument("--format", choices=EXPORT_FORMATS, default="md", help="md, csv or json")
    s.set_defaults(func=run_show_command)


# ---- plumbing ---------------------------------------------------------------------------


def _settings(args: argparse.Namespace) -> BenchSettings:
    from mtpstudio.core.bench.results import BenchSettings

    if args.repeat < 1 or args.n_predict < 1 or args.concurrency < 1:
        raise BenchError("--repeat, --n-predict and --concurrency must be at least 1")
    return BenchSettings(n_predict=args.n_predict, repeats=args.repeat)


def _progress(step: BenchProgress) -> None:
    if sys.stderr.isatty():
        print(
            f"\r{step.label}: {step.phase} {step.category} {step.done}/{step.total}   ",
            end="",
            file=sys.stderr,
            flush=True,
        )


def _api_key(args: argparse.Namespace) -> str | None:
    """The --url servers' key: from --api-key-file, or standard input with ``--api-key -``."""
    if args.api_key_file is not None:
        from mtpstudio.core.usecases.api_key import read_api_key

        return read_api_key(args.api_key_file)
    if args.api_key is None:
        return None
    if args.api_key != "-":
        raise BenchError(
            "an API key on the command line shows in `ps` and the shell history",
            hint="Put it in a file (umask 077; printf '%s\\n' KEY > FILE) and pass "
            "--api-key-file FILE, or pipe it in with --api-key -.",
        )
    key = sys.stdin.readline().strip()
    if not key or any(c.isspace() for c in key):
        raise BenchError("no API key on standard input", hint="Send the key on one line.")
    return key


def _url_target(
    url: str, flavour: str, label: str, args: argparse.Namespace, key: str | None
) -> BenchTarget:
    from mtpstudio.core.usecases.bench import url_target

    return url_target(url, flavour, label, expect_drafts=args.expect_drafts, api_key=key)


@dataclass
class _Targets:
    a: BenchTarget
    b: BenchTarget | None  # the A/B partner
    off: BenchTarget | None  # the gate's drafting-off reference


@contextmanager
def _targets(args: argparse.Namespace, stack: ExitStack) -> Iterator[_Targets]:
    from mtpstudio.core.usecases.bench import drafting_off_variant

    if args.url:
        key = _api_key(args)
        a = _url_target(args.url, args.engine_flavour, args.url, args, key)
        b = None
        if args.vs_url:
            flavour = args.vs_engine_flavour or args.engine_flavour
            b = _url_target(args.vs_url, flavour, args.vs_url, args, key)
            b = replace(b, drafting_requested=None)
        if args.vs or args.preset:
            raise BenchError("--vs and --preset need --plan", hint="Use --vs-url with --url.")
        if args.gate and b is None:
            raise BenchError(
                "the gate needs a drafting-off server to compare with",
                hint="Start the same model without MTP/draft and pass it as --vs-url.",
            )
        yield _Targets(a, b, b if args.gate else None)
        return
    if args.plan is None:
        raise BenchError(
            "say what to benchmark", hint="Give --url http://HOST:PORT or --plan PLAN.json."
        )
    launcher = _launcher(args)
    found = _variants(args)
    variants = (found[0], found[1]) if len(found) == 2 else None
    first = found[0]
    a = stack.enter_context(launcher(first.plan, label=first.label, env=first.env))
    b = None
    if variants:
        b = stack.enter_context(launcher(variants[1].plan, label=variants[1].label,
                                         env=variants[1].env))  # fmt: skip
    off = None
    if args.gate:
        reference = drafting_off_variant(first, variants[1:] if variants else ())
        if b is not None and variants is not None and reference.label == variants[1].label:
            off = b  # the A/B's B already is A with drafting off
        else:
            off = stack.enter_context(launcher(reference.plan, label=reference.label, env={}))
    yield _Targets(a, b, off)


class _Output:
    """Prints each result, stores it in the history and collects the --json document."""

    def __init__(self, history: BenchHistory | None) -> None:
        from mtpstudio.core.usecases.bench import utc_now
        from mtpstudio.core.usecases.speed import RunContexts

        self.history = history
        self.document: dict[str, Any] = {"started_at": utc_now()}
        self.failed = False
        self.gate_failed = False
        self.contexts = RunContexts()  # the estimate beside each run, planned here

    def ab(self, ab: ABReport, plan: Plan | None) -> BenchReport:
        from mtpstudio.core.usecases.bench import diagnose, render_ab_text

        for side in (ab.a, ab.b):
            self.contexts.estimated(side)
        findings = diagnose(ab.a, plan, ab)
        _clear_progress()
        print(render_ab_text(ab, findings))
        self.document["ab"] = ab.to_dict()
        self.document["findings"] = [f.to_dict() for f in findings]
        self.failed |= ab.error is not None
        if self.history is not None:
            first = self.history.add_report(ab.a, "ab-a")
            second = self.history.add_report(ab.b, "ab-b", group=first)
            self.document["history_ids"] = [first, second]
        return ab.a

    def bench(self, report: BenchReport, plan: Plan | None) -> BenchReport:
        from mtpstudio.core.usecases.bench import conclude, render_text

        outcome = conclude(self.contexts.estimated(report), plan, self.history)
        _clear_progress()
        print(render_text(report, outcome.findings))
        self.document["bench"] = report.to_dict()
        self.document["findings"] = [f.to_dict() for f in outcome.findings]
        self.failed |= report.error is not None
        if outcome.history_error is not None:
            raise outcome.history_error
        if outcome.run_id is not None:
            self.document["history_ids"] = [outcome.run_id]
        return report

    def gate(self, gate: GateReport, started_at: str) -> None:
        from mtpstudio.core.usecases.bench import render_gate_text

        _clear_progress()
        print()
        print(render_gate_text(gate))
        self.document["gate"] = gate.to_dict()
        self.gate_failed = not gate.passed
        self.failed |= gate.error is not None
        self._store("gate", gate.on_label, gate.to_dict(), started_at)

    def concurrency(self, conc: ConcurrencyReport) -> None:
        from mtpstudio.core.usecases.bench import render_concurrency_text

        _clear_progress()
        print()
        print(render_concurrency_text(conc))
        self.document["concurrency"] = conc.to_dict()
        self.failed |= conc.error is not None
        self._store("concurrency", conc.label, conc.to_dict())

    def _store(
        self, kind: str, label: str, data: dict[str, Any], started_at: str | None = None
    ) -> None:
        """Store a document run, dated when it started (not when the command did)."""
        from mtpstudio.core.usecases.bench import utc_now

        if self.history is not None:
            run_id = self.history.add_document(kind, label, data, started_at or utc_now())
            self.document.setdefault("history_ids", []).append(run_id)


def _on_samples(report: BenchReport) -> list[CompletionSample]:
    """The benchmark's own temperature-0 texts: the gate's drafting-on side."""
    return [c.samples[0] for c in report.categories if c.samples]


def run_bench_command(args: argparse.Namespace) -> int:
    """``mtpstudio bench``: run, print, store; exit 2 on a server failure, 1 on a failed gate."""
    from mtpstudio.core.bench.history import BenchHistory
    from mtpstudio.core.bench.vram import VramSampler
    from mtpstudio.core.usecases.bench import (
        gate_against,
        load_prompts,
        run_ab,
        run_bench,
        run_concurrent,
        select,
        utc_now,
    )

    settings = _settings(args)
    prompts = select(load_prompts(args.prompts), _categories(args.categories))
    if args.plan is not None and args.vs_url:
        raise BenchError("--vs-url goes with --url", hint="With --plan use --vs PLAN2 or --preset.")
    out = _Output(None if args.no_history else BenchHistory())
    if args.plan is not None and not args.together:
        report = _run_plans_in_turn(args, settings, prompts, out)
    else:
        with ExitStack() as stack, _targets(args, stack) as t:
            if t.b is not None:
                ab = run_ab(t.a, t.b, prompts, settings, progress=_progress, vram=VramSampler())
                report = out.ab(ab, t.a.plan)
            else:
                report = run_bench(t.a, prompts, settings, progress=_progress, vram=VramSampler())
                out.bench(report, t.a.plan)
            if t.off is not None and not out.failed:
                started = utc_now()
                out.gate(gate_against(t.off, _on_samples(report), t.a.name, prompts,
                                      settings.n_predict, progress=_progress), started)  # fmt: skip
            if args.concurrency > 1 and not out.failed:
                out.concurrency(run_concurrent(t.a, prompts, args.concurrency, settings,
                                               progress=_progress))  # fmt: skip
    cache_lines = getattr(_launcher(args), "moe_cache", []) if args.plan is not None else []
    if cache_lines:  # printed by each server as it stopped
        print()
        for label, words in cache_lines:
            print(f"{label}: {words}")
        out.document["moe_cache"] = [{"label": label, "words": w} for label, w in cache_lines]
    if args.json is not None:
        write_text_atomic(args.json, json.dumps(out.document, indent=2) + "\n")
    if out.failed:
        print(f"mtpstudio: {_first_error(out.document, report)}", file=sys.stderr)
        return 2
    return 1 if out.gate_failed else 0


def _run_plans_in_turn(
    args: argparse.Namespace,
    settings: BenchSettings,
    prompts: tuple[BenchPrompt, ...],
    out: _Output,
) -> BenchReport:
    """Plans one server at a time (two big models rarely fit one GPU together)."""
    from mtpstudio.core.bench.vram import VramSampler
    from mtpstudio.core.usecases.bench import (
        drafting_off_variant,
        gate_against,
        run_ab_rounds,
        run_bench,
        run_concurrent,
        utc_now,
    )

    launcher = _launcher(args)
    variants = _variants(args)
    first = variants[0]

    def opener(v: ABVariant) -> TargetOpener:
        return lambda: launcher(v.plan, label=v.label, env=v.env)

    if len(variants) == 2:
        ab = run_ab_rounds(opener(variants[0]), opener(variants[1]), prompts, settings,
                           progress=_progress, vram=VramSampler)  # fmt: skip
        report = out.ab(ab, first.plan)
    else:
        with opener(first)() as a:
            report = out.bench(
                run_bench(a, prompts, settings, progress=_progress, vram=VramSampler()),
                first.plan,
            )
            if args.concurrency > 1 and not out.failed:
                out.concurrency(run_concurrent(a, prompts, args.concurrency, settings,
                                               progress=_progress))  # fmt: skip
    if len(variants) == 2 and args.concurrency > 1 and not out.failed:
        with opener(first)() as a:
            out.concurrency(run_concurrent(a, prompts, args.concurrency, settings,
                                           progress=_progress))  # fmt: skip
    if args.gate and not out.failed:
        started = utc_now()
        reference = drafting_off_variant(first, variants[1:])
        with launcher(reference.plan, label=reference.label, env={}) as off:
            out.gate(gate_against(off, _on_samples(report), first.label, prompts,
                                  settings.n_predict, progress=_progress), started)  # fmt: skip
    return report


def _variants(args: argparse.Namespace) -> tuple[ABVariant, ...]:
    from mtpstudio.core.bench.ab import PRESETS, ABVariant
    from mtpstudio.core.plan.io import load_plan

    plan = load_plan(args.plan)
    if args.preset:
        return PRESETS[args.preset](plan)
    if args.vs:
        return ABVariant(args.plan.stem, plan), ABVariant(args.vs.stem, load_plan(args.vs))
    return (ABVariant(args.plan.stem, plan),)


def _first_error(document: dict[str, Any], report: BenchReport) -> str:
    for key in ("ab", "bench", "gate", "concurrency"):
        part = document.get(key)
        if not isinstance(part, dict):
            continue
        for candidate in (part.get("error"), (part.get("a") or {}).get("error"),
                          (part.get("b") or {}).get("error")):  # fmt: skip
            if candidate:
                return str(candidate)
    return report.error or "the benchmark did not finish"


def _clear_progress() -> None:
    if sys.stderr.isatty():
        print("\r" + " " * 70 + "\r", end="", file=sys.stderr, flush=True)


def _categories(text: str | None) -> list[str] | None:
    if not text:
        return None
    return [c.strip() for c in text.split(",") if c.strip()]


# ---- history ----------------------------------------------------------------------------


def run_history_command(args: argparse.Namespace) -> int:
    from mtpstudio.core.bench.history import BenchHistory

    entries = BenchHistory().entries()
    if args.json:
        print(json.dumps([e.summary() for e in entries], indent=2))
        return 0
    if not entries:
        print("no benchmark runs yet (run `mtpstudio bench --url http://HOST:PORT`)")
        return 0
    print(f"{'id':>4}  {'when':<25} {'kind':<12} {'engine':<9} {'req':>4} {'tok/s':>8} "
          f"{'accept':>7}  label")  # fmt: skip
    for e in entries:
        agg = e.aggregate
        tok_s = agg.get("tok_s")
        rate = agg.get("aggregate_accept_rate")
        flag = "  (cancelled)" if e.report.get("cancelled") else ""
        flag = flag or ("  (error)" if e.report.get("error") else "")
        print(
            f"{e.id:>4}  {e.created_at:<25} {e.kind:<12} {e.engine_flavour or '-':<9} "
            f"{agg.get('n_requests', '-'):>4} {'-' if tok_s is None else f'{tok_s:.2f}':>8} "
            f"{'-' if rate is None else f'{rate:.3f}':>7}  {e.label}{flag}"
        )
    return 0


def run_show_command(args: argparse.Namespace) -> int:
    from mtpstudio.core.bench.history import BenchHistory
    from mtpstudio.core.usecases.bench import export_entry

    entry = BenchHistory().get(args.id)
    sys.stdout.write(export_entry(entry, args.format))
    return 0
