"""HTTP to llama-server for the benchmark: streamed completions with timings, tokens, metrics."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from mtpstudio.core.bench.target import BenchTarget, CancelToken
from mtpstudio.core.engines.profiles import default_port_words, profile_for
from mtpstudio.core.errors import BenchError
from mtpstudio.core.outside_text import visible
from mtpstudio.core.plan.choices import EngineFlavour

MAX_LINE_BYTES = 16 * 1024 * 1024
"""A streamed line longer than this ends the request (a completion chunk is a few KB)."""
MAX_BODY_BYTES = 64 * 1024 * 1024
"""A JSON answer (tokenize, completion) longer than this is refused."""
ERROR_BODY_BYTES = 64 * 1024
"""How much of an error answer is read to quote it."""

_COUNTERS = {
    "predicted": "llamacpp:tokens_predicted_total",
    "prompt": "llamacpp:prompt_tokens_total",
    "draft": "llamacpp:spec_decode_num_draft_tokens_total",
    "accepted": "llamacpp:spec_decode_num_accepted_tokens_total",
}


@dataclass(frozen=True)
class CompletionSample:
    """One completion: the server's own ``timings`` plus what the client measured.

    ``ttft_ms`` is from sending the request to the first streamed token; ``client_decode_tps``
    is (tokens - 1) / (last token - first token) as seen by the client.
    """

    category: str
    text: str
    predicted_n: int
    prompt_n: int
    draft_n: int
    accepted_n: int
    predicted_ms: float
    prompt_ms: float
    predicted_per_second: float
    prompt_per_second: float
    ttft_ms: float | None
    wall_ms: float
    client_decode_tps: float | None
    speculative_types: str | None = None
    token_ids: tuple[int, ...] | None = None  # the generated ids, when the stream carries them
    prompt: str | None = None  # the prompt sent (the gate re-asks the server about it)

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "predicted": self.predicted_n,
            "prompt": self.prompt_n,
            "draft": self.draft_n,
            "accepted": self.accepted_n,
            "predicted_ms": round(self.predicted_ms, 3),
            "prompt_ms": round(self.prompt_ms, 3),
            "decode_tok_s": round(self.predicted_per_second, 3),
            "prefill_tok_s": round(self.prompt_per_second, 3),
            "ttft_ms": None if self.ttft_ms is None else round(self.ttft_ms, 3),
            "wall_ms": round(self.wall_ms, 3),
            "client_decode_tok_s": (
                None if self.client_decode_tps is None else round(self.client_decode_tps, 3)
            ),
        }


def completion_payload(
    flavour: EngineFlavour,
    prompt: str,
    n_predict: int,
    temperature: float,
    ignore_eos: bool,
    stream: bool = True,
) -> dict[str, Any]:
    """The request body for the flavour's endpoint: greedy at temperature 0, prompt cache off."""
    payload: dict[str, Any] = {
        "prompt": prompt,
        "temperature": temperature,
        "cache_prompt": False,
        "stream": stream,
        "ignore_eos": ignore_eos,
    }
    payload[profile_for(flavour).bench.n_predict_field] = n_predict
    return payload


def completion_endpoint(flavour: EngineFlavour) -> str:
    """The endpoint that reports draft counts for ``flavour`` (engines.md §4 "timings")."""
    return profile_for(flavour).bench.endpoint


PER_POSITION = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
"""Accepted draft tokens at each draft position (upstream, labelled ``position="i"``)."""
DRAFTS = "llamacpp:spec_decode_num_drafts_total"
"""Speculative verification steps: how often a draft was checked (each position's chance)."""
_POSITION = re.compile(rf'^{re.escape(PER_POSITION)}\{{position="(\d+)"\}}\s+(\S+)')


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {name: value} for unlabelled samples; the per-position accepted
    counter as ``name[i]``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if (m := _POSITION.match(line)) is not None:
            with contextlib.suppress(ValueError):
                out[f"{PER_POSITION}[{int(m.group(1))}]"] = float(m.group(2))
            continue
        if not line or line.startswith("#") or "{" in line:
            continue
        name, _, value = line.partition(" ")
        try:
            out[name] = float(value.split()[0])
        except (ValueError, IndexError):
            continue
    return out


def metric_counters(metrics: dict[str, float]) -> dict[str, float]:
    """The benchmark's counters (predicted, prompt, draft, accepted; drafts and accepted at
    each position ``pos0``, ``pos1`` … when the server counts them) from ``parse_metrics``."""
    out = {key: metrics[name] for key, name in _COUNTERS.items() if name in metrics}
    if DRAFTS in metrics:
        out["drafts"] = metrics[DRAFTS]
    for name, value in metrics.items():
        if name.startswith(f"{PER_POSITION}["):
            out[f"pos{name[len(PER_POSITION) + 1 : -1]}"] = value
    return out


class BenchClient:
    """One HTTP connection pool to a target; not thread-safe across streams (one per thread)."""

    def __init__(self, target: BenchTarget, timeout_s: float = 600.0) -> None:
        self.target = target
        # One connection per request: llama-server's HTTP library closes kept-alive connections
        # after a few requests, and a request sent on such a socket fails at random.
        headers = {"Connection": "close"}
        if target.api_key:
            headers["Authorization"] = f"Bearer {target.api_key}"
        self._http = httpx.Client(
            base_url=target.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            trust_env=False,  # loopback: never through a proxy from the environment
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> BenchClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def endpoint(self) -> str:
        return completion_endpoint(self.target.flavour)

    # ---- requests -----------------------------------------------------------------------

    def complete(
        self,
        category: str,
        prompt: str,
        n_predict: int,
        *,
        temperature: float = 0.0,
        ignore_eos: bool = True,
        cancel: CancelToken | None = None,
    ) -> CompletionSample:
        """Stream one completion and return its sample; raises BenchError when it fails."""
        payload = completion_payload(
            self.target.flavour, prompt, n_predict, temperature, ignore_eos
        )
        started = time.perf_counter()
        token_times: list[float] = []
        pieces: list[str] = []
        ids: list[int] | None = []
        final: dict[str, Any] | None = None
        try:
            with self._http.stream("POST", self.endpoint, json=payload) as response:
                if response.status_code != 200:
                    raise BenchError(
                        f"{self.target.name} answered HTTP {response.status_code} on "
                        f"{self.endpoint}: {_error_text(_read_bounded(response, ERROR_BODY_BYTES))}"
                    )
                lines = _bounded_lines(response.iter_bytes(), self.target.name, category)
                for chunk in _sse_chunks(lines):
                    if cancel is not None:
                        cancel.raise_if_cancelled()
                    if "error" in chunk:
                        raise BenchError(
                            f"{self.target.name} reported an error mid-stream: "
                            f"{_error_text(json.dumps(chunk))}"
                        )
                    now = time.perf_counter()
                    text, is_final = _chunk_text(chunk)
                    if is_final:
                        pieces.append(text)
                        final = chunk
                    else:
                        token_times.append(now)
                        pieces.append(text)
                        tokens = chunk.get("tokens")
                        if ids is not None and isinstance(tokens, list):
                            ids.extend(int(t) for t in tokens)
                        else:
                            ids = None  # OAI chunks carry text only
        except httpx.HTTPError as exc:
            raise BenchError(
                f"{self.target.name} stopped answering during {category!r} "
                f"({type(exc).__name__}: {exc or 'connection lost'})",
                hint="Check that the server is still running (its log says why it stopped).",
            ) from None
        ended = time.perf_counter()
        if final is None or not isinstance(final.get("timings"), dict):
            raise BenchError(
                f"{self.target.name} ended the {category!r} stream without its timings",
                hint="Is this a llama.cpp or ik_llama.cpp llama-server of the chosen flavour?",
            )
        sample = _sample(category, "".join(pieces), final, started, ended, token_times)
        sample = dataclasses.replace(sample, prompt=prompt)
        if ids is not None and len(ids) == sample.predicted_n:
            sample = dataclasses.replace(sample, token_ids=tuple(ids))
        return sample

    def tokenize(self, text: str) -> list[tuple[int, str]]:
        """The server's tokens for ``text`` as (id, piece); pieces come from /detokenize."""
        body = self._post_json("/tokenize", {"content": text, "with_pieces": True})
        out: list[tuple[int, str]] = []
        ids_without_piece: list[int] = []
        for item in body.get("tokens", []):
            if isinstance(item, dict):
                out.append((int(item["id"]), str(item.get("piece", ""))))
            else:
                ids_without_piece.append(int(item))
        if ids_without_piece:  # older servers: plain ids; pieces one by one
            out = [(tid, self.detokenize([tid])) for tid in ids_without_piece]
        return out

    def top_logprobs(self, prompt: str, generated: list[int], n: int) -> dict[int, float]:
        """{token id: log-probability} of the ``n`` likeliest next tokens after ``prompt`` and
        the ``generated`` ids (upstream's native endpoint, which takes token arrays)."""
        ids = self._post_json("/tokenize", {"content": prompt, "add_special": True}).get(
            "tokens", []
        )
        prompt_ids = [int(t["id"]) if isinstance(t, dict) else int(t) for t in ids]
        body = self._post_json(
            "/completion",
            {
                "prompt": prompt_ids + generated,
                "n_predict": 1,
                "temperature": 0.0,
                "n_probs": n,
                "cache_prompt": False,
            },
        )
        probs = body.get("completion_probabilities") or []
        if not probs or not isinstance(probs[0], dict):
            return {}
        return {int(t["id"]): float(t["logprob"]) for t in probs[0].get("top_logprobs", [])}

    def detokenize(self, tokens: list[int]) -> str:
        return str(self._post_json("/detokenize", {"tokens": tokens}).get("content", ""))

    def metrics(self) -> dict[str, float] | None:
        """Parsed /metrics, or None when the server was started without ``--metrics``."""
        try:
            response = self._http.get("/metrics")
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        return parse_metrics(response.text)

    def check_ready(self) -> None:
        """Raise BenchError unless GET /health answers 200 (the model is loaded)."""
        try:
            response = self._http.get("/health", timeout=10.0)
        except httpx.HTTPError as exc:
            raise BenchError(
                f"no server answers at {self.target.base_url} ({type(exc).__name__})",
                hint="Start llama-server there first, or check the host and port (one started "
                f"without --port listens on {default_port_words()}).",
            ) from None
        if response.status_code != 200:
            raise BenchError(
                f"the server at {self.target.base_url} is not ready (HTTP "
                f"{response.status_code}: {_error_text(response.text)})",
                hint="Wait until the model has loaded, then run the benchmark again.",
            )

    def props(self) -> dict[str, Any]:
        try:
            response = self._http.get("/props")
            data = response.json() if response.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _post_json(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            with self._http.stream("POST", path, json=payload) as response:
                limit = MAX_BODY_BYTES if response.status_code == 200 else ERROR_BODY_BYTES
                body = _read_bounded(response, limit)
                if response.status_code != 200:
                    raise BenchError(
                        f"{self.target.name} answered HTTP {response.status_code} on {path}: "
                        f"{_error_text(body)}"
                    )
                if len(body.encode()) > MAX_BODY_BYTES:
                    raise BenchError(
                        f"{self.target.name} answered {path} with more than "
                        f"{MAX_BODY_BYTES // (1024 * 1024)} MiB"
                    )
        except httpx.HTTPError as exc:
            raise BenchError(
                f"{self.target.name} did not answer {path} ({type(exc).__name__})"
            ) from None
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            raise BenchError(
                f"{self.target.name} answered {path} with something that is not JSON: "
                f"{_error_text(body)}"
            ) from None
        return data if isinstance(data, dict) else {}


def _read_bounded(response: httpx.Response, limit: int) -> str:
    """At most ``limit`` bytes (and one more, to tell) of a streamed answer, as text."""
    data = bytearray()
    for piece in response.iter_bytes():
        data += piece
        if len(data) > limit:
            break
    return bytes(data[: limit + 1]).decode("utf-8", errors="replace")


def _bounded_lines(chunks: Iterator[bytes], name: str, category: str) -> Iterator[str]:
    """Lines of a streamed answer (``\\n``, ``\\r\\n`` or ``\\r`` ended; a ``\\r\\n`` also
    yields an empty line, which SSE skips), none longer than ``MAX_LINE_BYTES``: an endless
    line ends the request instead of filling the memory."""
    pending = bytearray()
    for piece in chunks:
        piece = piece.replace(b"\r", b"\n")
        start = 0
        while (end := piece.find(b"\n", start)) >= 0:
            pending += piece[start:end]
            yield pending.decode("utf-8", errors="replace")
            pending.clear()
            start = end + 1
        pending += piece[start:]
        if len(pending) > MAX_LINE_BYTES:
            raise BenchError(
                f"{name} sent a line longer than {MAX_LINE_BYTES // (1024 * 1024)} MiB while "
                f"streaming {category!r}, so mtpstudio stopped reading it",
                hint="Is this a llama.cpp or ik_llama.cpp llama-server? Check the URL.",
            )
    if pending:
        yield pending.decode("utf-8", errors="replace")


def _sse_chunks(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """JSON objects from SSE ``data:`` lines; comments (``:``) skipped, ``[DONE]`` ends."""
    for line in lines:
        if not line or line.startswith(":"):
            continue
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            continue
        if isinstance(chunk, dict):
            yield chunk


def _chunk_text(chunk: dict[str, Any]) -> tuple[str, bool]:
    """(generated text, is this the final chunk with timings) for native and OAI chunks."""
    choices = chunk.get("choices")
    if isinstance(choices, list) and choices:
        choice = choices[0] if isinstance(choices[0], dict) else {}
        text = str(choice.get("text") or "")
        is_final = "timings" in chunk or choice.get("finish_reason") is not None
        return text, is_final
    if "choices" in chunk:  # OAI usage-only chunk
        return "", True
    return str(chunk.get("content") or ""), bool(chunk.get("stop"))


def _sample(
    category: str,
    text: str,
    final: dict[str, Any],
    started: float,
    ended: float,
    token_times: list[float],
) -> CompletionSample:
    t = final["timings"]
    predicted_n = int(t.get("predicted_n", 0))
    first = token_times[0] if token_times else None
    client_tps = None
    if len(token_times) >= 2 and predicted_n >= 2 and token_times[-1] > token_times[0]:
        client_tps = (predicted_n - 1) / (token_times[-1] - token_times[0])
    settings = final.get("generation_settings")
    spec = settings.get("speculative.types") if isinstance(settings, dict) else None
    return CompletionSample(
        category=category,
        text=text,
        predicted_n=predicted_n,
        prompt_n=int(t.get("prompt_n", 0)),
        draft_n=int(t.get("draft_n", 0)),
        accepted_n=int(t.get("draft_n_accepted", 0)),
        predicted_ms=float(t.get("predicted_ms", 0.0)),
        prompt_ms=float(t.get("prompt_ms", 0.0)),
        predicted_per_second=float(t.get("predicted_per_second", 0.0)),
        prompt_per_second=float(t.get("prompt_per_second", 0.0)),
        ttft_ms=None if first is None else (first - started) * 1000.0,
        wall_ms=(ended - started) * 1000.0,
        client_decode_tps=client_tps,
        speculative_types=str(spec) if isinstance(spec, str) else None,
    )


def _error_text(body: str) -> str:
    """The ``error.message`` of a llama-server error body, else the body's start."""
    try:
        data = json.loads(body)
    except (ValueError, TypeError, RecursionError):
        return visible(body.strip()[:300]) or "(empty answer)"
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and "message" in err:
            return visible(str(err["message"])[:300])
    return visible(body.strip()[:300])
