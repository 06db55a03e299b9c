"""How an engine decodes, as the speed estimate needs it: its MTP step, which passes replay a CUDA
graph, its CPU kernels and graph, and the acceptance published for it.

Read from the pinned sources (upstream b11434's ``common/speculative.cpp``,
``tools/server/server-context.cpp``, ``ggml/src/ggml-cuda/ggml-cuda.cu``; ik_llama.cpp 8337e4c's
``common/speculative.cpp``, ``ggml/src/ggml-cuda.cu`` and ``src/llama-build-context.cpp``):

* **upstream** checks p-min before keeping even the first draft token (a draft may be empty),
  makes one single-token pass of the MTP context per draft token, and after every verification
  runs the MTP context once more over the verified batch (its catch-up). A CUDA graph is
  captured after two calls of the same shape and replayed while the shape stays: a verification
  replays one only when its batch is as long as the two before it (always, with p-min 0, whose
  drafts are always full); the MTP context alternates its catch-up batch with single tokens, so
  its passes run without (inferred from the warm-up rule, not measured).
* **ik_llama.cpp** keeps the first draft token whatever its probability; the pass over the
  accepted tokens after a verification yields the next step's first draft, so a step makes that
  pass and one single-token pass per further position tried. A routed-expert product of two or
  more tokens disables CUDA graphs, and so do four updates of a graph in a row: an MoE
  verification never replays one, a dense one only while its batch never changes (p-min 0). Its
  routed experts of a batch of two or more run in the tiled kernel (MMQ), not the per-token
  mat-vec. Its default fusions make fewer graph nodes (``graph_nodes.ik_fused``), and its CPU
  kernels are its own (the ``iqk`` table of ``speed.cpu_kernels``).

Neither engine sends experts kept in RAM to the card for a decoding or verification batch (both
need 32 tokens or more), which the speed model's ``traffic`` already follows.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineSpeedFacts:
    """One engine's decoding, as its source runs it.

    Attributes:
        name: the engine in the estimate's words.
        first_draft_kept: the first draft token is kept whatever p-min.
        catch_up: after a verification the MTP context runs over the verified batch.
        accept_pass: the MTP context's pass over the accepted tokens gives the next first draft.
        moe_verify_graphs: an MoE verification batch may replay a CUDA graph.
        varying_verify_graphs: a graph survives a verification batch that changes length.
        tiled_moe_verify: the routed experts of 2+ tokens run the tiled kernel (MMQ).
        fused_moe_graph: the engine's graph fuses the MoE block (``graph_nodes.ik_fused``).
        cpu_kernels: which measured CPU kernel table is the engine's (``ggml`` or ``iqk``).
        published_acceptance: accepted / drafted of the published setup on this engine.
        published_counters: that run's (predicted, drafted, accepted), when published.
        default_p_min: the engine's own p-min default.
    """

    name: str
    first_draft_kept: bool
    catch_up: bool
    accept_pass: bool
    moe_verify_graphs: bool
    varying_verify_graphs: bool
    tiled_moe_verify: bool
    fused_moe_graph: bool
    cpu_kernels: str
    published_acceptance: float
    published_counters: tuple[int, int, int] | None
    default_p_min: float

    def verify_graph_share(self, moe: bool, p_min: float, lengths: list[float]) -> float:
        """The share of verification passes that replay a CUDA graph, given the chance of
        each verified length (``lengths``): a graph replays when the batch is as long as the
        two before it."""
        if moe and not self.moe_verify_graphs:
            return 0.0
        if p_min <= 0:
            return 1.0
        if not self.varying_verify_graphs:
            return 0.0
        return sum(c**3 for c in lengths)


UPSTREAM_SPEED = EngineSpeedFacts(
    name="upstream",
    first_draft_kept=False,
    catch_up=True,
    accept_pass=False,
    moe_verify_graphs=True,
    varying_verify_graphs=True,
    tiled_moe_verify=False,
    fused_moe_graph=False,
    cpu_kernels="ggml",
    published_acceptance=1052 / 1120,
    published_counters=(1728, 1120, 1052),
    default_p_min=0.0,
)
"""Upstream llama.cpp (b11434; b11549 the same); the published setup's counters
(reference/world-2026-12.md §1)."""

IK_SPEED = EngineSpeedFacts(
    name="ik_llama.cpp",
    first_draft_kept=True,
    catch_up=False,
    accept_pass=True,
    moe_verify_graphs=False,
    varying_verify_graphs=False,
    tiled_moe_verify=True,
    fused_moe_graph=True,
    cpu_kernels="iqk",
    published_acceptance=0.8749,
    published_counters=None,
    default_p_min=0.75,
)
"""ik_llama.cpp (8337e4c); the published setup's acceptance on it (world-2026-12.md §1)."""
