"""Typed facts about a model, derived from its GGUF header (see ``core.gguf``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property


@dataclass(frozen=True)
class TensorInfo:
    """One entry of a GGUF tensor table.

    ``shape`` is in GGUF/ggml ``ne`` order (fastest-varying dimension first). ``offset`` is
    relative to the start of the tensor-data section of ``file_index`` (0 for single files).
    """

    name: str
    ggml_type: int
    type_name: str
    shape: tuple[int, ...]
    n_bytes: int
    offset: int
    file_index: int = 0

    @property
    def n_elements(self) -> int:
        n = 1
        for dim in self.shape:
            n *= dim
        return n

    @cached_property
    def layer(self) -> int | None:
        """The block index for ``blk.N.*`` tensors, else ``None`` (read once: the placement
        asks for it many times per budget)."""
        if not self.name.startswith("blk."):
            return None
        head = self.name.split(".", 2)[1]
        return int(head) if head.isdigit() else None


@dataclass(frozen=True)
class ModelInfo:
    """What mtpstudio needs to know about a model; everything comes from the GGUF header.

    Layer counts: ``block_count`` is the GGUF key (it includes MTP/nextn layers);
    ``n_layer`` is the trunk (``block_count - n_nextn_layer``). ``recurrent_layers`` lists the
    trunk layers that hold recurrent (SSM / gated DeltaNet) state instead of a KV cache.
    """

    architecture: str
    name: str
    block_count: int
    n_layer: int
    n_nextn_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    key_length: int
    value_length: int
    context_length: int
    vocab_size: int
    n_expert: int = 0
    n_expert_used: int = 0
    ffn_length: int = 0
    expert_ffn_length: int = 0
    shared_expert_ffn_length: int = 0
    full_attention_interval: int = 0
    recurrent_layers: tuple[int, ...] = ()
    ssm_conv_kernel: int = 0
    ssm_inner_size: int = 0
    ssm_state_size: int = 0
    ssm_time_step_rank: int = 0
    ssm_group_count: int = 0
    sliding_window: int = 0
    n_dense_lead: int = 0  # leading layers with a dense FFN before the MoE ones (GLM-4.5)
    expert_weights_norm: bool = False
    expert_weights_scale: float = 0.0
    file_size: int = 0
    full_file_size: int = 0  # what file_size is once every tensor's data is there (0: unknown)
    data_start: int = 0  # bytes of header before the tensor data (all parts together)
    n_params: int = 0
    tensor_bytes: int = 0
    tensors: tuple[TensorInfo, ...] = field(default=(), repr=False)
    quant_mix: dict[str, int] = field(default_factory=dict)  # ggml type name -> bytes
    file_type: str | None = None
    paths: tuple[str, ...] = ()

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.tensor_bytes / self.n_params if self.n_params else 0.0

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """Trunk layers with a KV cache (all trunk layers that are not recurrent)."""
        recurrent = set(self.recurrent_layers)
        return tuple(i for i in range(self.n_layer) if i not in recurrent)

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 0

    @property
    def has_mtp(self) -> bool:
        return self.n_nextn_layer > 0
