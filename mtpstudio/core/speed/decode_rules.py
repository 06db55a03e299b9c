"""How each engine runs an MTP step: which passes it makes, and which of them replay a CUDA graph.

Read from the pinned sources (upstream b11434's ``common/speculative.cpp``,
``tools/server/server-context.cpp``, ``ggml/src/ggml-cuda/ggml-cuda.cu``; ik_llama.cpp 8337e4c's
``common/speculative.cpp`` and ``ggml/src/ggml-cuda.cu``):

* **upstream** checks p-min before keeping even the first draft token (a draft may be empty),
  makes one single-token pass of the MTP context per draft token, and after every verification
  runs the MTP context once more over the verified batch (its catch-up). A CUDA graph is
  captured after two calls of the same shape and replayed while the shape stays: a verification
  replays one only when its batch is as long as the two before it (always, with p-min 0, whose
  drafts are always full); the MTP context alternates its catch-up batch with single tokens, so
  its passes run without (inferred from the warm-up rule, not measured).
* **ik_llama.cpp** keeps the first draft token whatever its probability; the pass over the
  accepted tokens after a verification yields the next step's first draft, so a step makes that
  pass and one single-token pass per further draft. A routed-expert product of two or more
  tokens disables CUDA graphs, and so do four updates of a graph in a row: an MoE verification
  never replays one, a dense one only while its batch never changes (p-min 0). Its routed
  experts of a batch of two or more run in the tiled kernel (MMQ), not the per-token mat-vec.

Neither engine sends experts kept in RAM to the card for a decoding or verification batch (both
need 32 tokens or more), which ``traffic`` already follows.
"""

from __future__ import annotations

from dataclasses import dataclass

MMVQ_MAX_BATCH = 8
"""Quantized products of up to 8 tokens run the mat-vec kernel, one column per token, its
dequantisation done again for each (``mmvq.cuh`` ``MMVQ_MAX_BATCH_SIZE``, both engines)."""


@dataclass(frozen=True)
class DecodeRules:
    """One engine's MTP step, as its source runs it."""

    engine: str
    first_draft_kept: bool
    catch_up: bool
    accept_pass: bool
    moe_verify_graphs: bool
    dense_verify_graphs_varying: bool
    tiled_moe_verify: bool

    def verify_graph_share(self, moe: bool, p_min: float, lengths: list[float]) -> float:
        """The share of verification passes that replay a CUDA graph, given the chance of
        each verified length (``lengths``): a graph replays when the batch is as long as the
        two before it."""
        if moe and not self.moe_verify_graphs:
            return 0.0
        if p_min <= 0:
            return 1.0
        if not self.dense_verify_graphs_varying:
            return 0.0
        return sum(c**3 for c in lengths)


UPSTREAM_RULES = DecodeRules(
    engine="upstream",
    first_draft_kept=False,
    catch_up=True,
    accept_pass=False,
    moe_verify_graphs=True,
    dense_verify_graphs_varying=True,
    tiled_moe_verify=False,
)
IK_RULES = DecodeRules(
    engine="ik",
    first_draft_kept=True,
    catch_up=False,
    accept_pass=True,
    moe_verify_graphs=False,
    dense_verify_graphs_varying=False,
    tiled_moe_verify=True,
)


def rules_for(flavour: str) -> DecodeRules:
    """The rules of an engine flavour (``upstream`` or ``ik``)."""
    return IK_RULES if flavour == "ik" else UPSTREAM_RULES
