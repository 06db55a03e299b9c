"""The tiny models' shapes the memory-model accuracy suite loads in the real engines
(``tests/integration/test_budget_accuracy.py``); the allocator-trace tests replay the same
shapes (``tests/memory/test_graph_alloc.py``)."""

from __future__ import annotations

BIG = dict(n_ctx_train=65536)
HYBRID = dict(
    n_embd=256,
    n_head=4,
    n_head_kv=2,
    head_dim=64,
    n_layer=4,
    n_expert=8,
    n_expert_used=2,
    n_ff_exp=128,
    n_ff_shexp=128,
    ssm_d_state=64,
    ssm_n_group=2,
    ssm_dt_rank=4,
    n_vocab=4000,
    **BIG,
)
DENSE = dict(
    n_embd=256, n_ff=512, n_head=4, n_head_kv=2, head_dim=64, n_layer=2, n_vocab=4000, **BIG
)
MOE = dict(
    n_embd=256,
    n_head=4,
    n_head_kv=2,
    head_dim=64,
    n_layer=2,
    n_expert=8,
    n_expert_used=2,
    n_ff_exp=128,
    n_vocab=4000,
    **BIG,
)
