"""mtpstudio: run MoE models with multi-token prediction on 12-16 GB GPUs."""

__version__ = "0.1.0"
