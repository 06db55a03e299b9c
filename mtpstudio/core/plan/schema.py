"""The Plan: the whole configuration as one versioned pydantic model, shared by GUI and CLI."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from mtpstudio.core.plan.choices import (
    CacheType,
    DesktopReclaim,
    EngineFlavour,
    FlashAttention,
    LoadMode,
    MoePlacement,
    ShortVram,
    SplitMode,
)
from mtpstudio.core.plan.settings import (
    MAX_LAYERS,
    MAX_MARGIN_MIB,
    Setting,
    setting,
)

SCHEMA_VERSION: Literal[2] = 2
"""Version 1 files still load: see ``_migrate_v1`` (MTP on/off became auto/on/off; the API key
moved out of the file)."""
DEFAULT_PORT = 8080
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)\Z")
_DEVICE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}\Z")


def is_host(value: str) -> bool:
    """An IPv4/IPv6 address or an RFC 1123 host name (never something an argv parser could
    read as an option)."""
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        pass
    labels = value.removesuffix(".").split(".")
    return 0 < len(value) <= 253 and all(_HOST_LABEL.match(label) for label in labels)


def entry(path: str, **extra: Any) -> Any:
    """The field of the Plan setting at ``path``: its default and description from its one
    declaration (``plan.settings``); ``extra``: the field's own validation (strict, a
    pattern)."""
    declared_here = setting(path)
    if declared_here.default == ():
        return Field(default_factory=list, description=declared_here.tooltip, **extra)
    return Field(default=declared_here.default, description=declared_here.tooltip, **extra)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_enum_values=False)

    @field_validator("*")
    @classmethod
    def _within_declared_bounds(cls, value: Any, info: ValidationInfo) -> Any:
        """A field declared in ``plan.settings`` keeps its bounds, in its one sentence."""
        field = cls.model_fields.get(info.field_name or "")
        found = declared(field.metadata) if field is not None else None
        return value if found is None else found.check(value)


class ModelChoice(_Section):
    """The model: a GGUF file on disk or a demo card from the catalogue."""

    path: Annotated[Path | None, setting("model.path")] = entry("model.path")
    card: Annotated[str | None, setting("model.card")] = entry("model.card")

    @field_validator("path")
    @classmethod
    def _path_on_one_line(cls, value: Path | None) -> Path | None:
        if value is not None and "\n" in str(value):
            raise ValueError("model path must not contain a newline")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if self.path is None and not self.card:
            raise ValueError("choose a model: a GGUF path or a demo card id")
        return self

    @property
    def label(self) -> str:
        return str(self.path) if self.path is not None else f"demo card {self.card}"


class EngineChoice(_Section):
    """The inference engine build."""

    flavour: Annotated[EngineFlavour, setting("engine.flavour")] = entry("engine.flavour")
    binary: Annotated[Path | None, setting("engine.binary")] = entry("engine.binary")

    @field_validator("binary")
    @classmethod
    def _binary_on_one_line(cls, value: Path | None) -> Path | None:
        if value is not None and "\n" in str(value):
            raise ValueError("engine path must not contain a newline")
        return value


class MtpOptions(_Section):
    """Multi-token prediction: the model's own nextn layer drafts tokens."""

    enabled: Annotated[bool | None, setting("mtp.enabled")] = entry("mtp.enabled", strict=True)
    draft_max: Annotated[int, setting("mtp.draft_max")] = entry("mtp.draft_max", strict=True)
    draft_min: Annotated[int, setting("mtp.draft_min")] = entry("mtp.draft_min", strict=True)
    draft_p_min: Annotated[float, setting("mtp.draft_p_min")] = entry(
        "mtp.draft_p_min", strict=True
    )
    acceptance: Annotated[float | None, setting("mtp.acceptance")] = entry("mtp.acceptance")
    cache_type_k: Annotated[CacheType, setting("mtp.cache_type_k")] = entry("mtp.cache_type_k")
    cache_type_v: Annotated[CacheType, setting("mtp.cache_type_v")] = entry("mtp.cache_type_v")

    @model_validator(mode="after")
    def _min_not_above_max(self) -> Self:
        if self.draft_min > self.draft_max:
            raise ValueError(
                f"draft min ({self.draft_min}) must not exceed draft max ({self.draft_max})"
            )
        return self


class DraftModelOptions(_Section):
    """A separate small draft model for speculative decoding (instead of MTP).

    Its depth, p-min and K/V cache types are the ``mtp`` section's draft settings.
    """

    path: Annotated[Path | None, setting("draft.path")] = entry("draft.path")
    gpu_layers: Annotated[int | None, setting("draft.gpu_layers")] = entry(
        "draft.gpu_layers", strict=True
    )

    @field_validator("path")
    @classmethod
    def _draft_on_one_line(cls, value: Path | None) -> Path | None:
        if value is not None and "\n" in str(value):
            raise ValueError("draft model path must not contain a newline")
        return value


class RuntimeOptions(_Section):
    """What the engine is asked to allocate and how it places weights."""

    ctx: Annotated[int, setting("runtime.ctx")] = entry("runtime.ctx", strict=True)
    cache_type_k: Annotated[CacheType, setting("runtime.cache_type_k")] = entry(
        "runtime.cache_type_k"
    )
    cache_type_v: Annotated[CacheType, setting("runtime.cache_type_v")] = entry(
        "runtime.cache_type_v"
    )
    flash_attn: Annotated[FlashAttention, setting("runtime.flash_attn")] = entry(
        "runtime.flash_attn"
    )
    batch: Annotated[int, setting("runtime.batch")] = entry("runtime.batch", strict=True)
    ubatch: Annotated[int, setting("runtime.ubatch")] = entry("runtime.ubatch", strict=True)
    parallel: Annotated[int, setting("runtime.parallel")] = entry("runtime.parallel", strict=True)
    threads: Annotated[int | None, setting("runtime.threads")] = entry(
        "runtime.threads", strict=True
    )
    moe: Annotated[MoePlacement, setting("runtime.moe")] = entry("runtime.moe")
    n_cpu_moe: Annotated[int, setting("runtime.n_cpu_moe")] = entry(
        "runtime.n_cpu_moe", strict=True
    )
    moe_cache_mib: Annotated[int, setting("runtime.moe_cache_mib")] = entry(
        "runtime.moe_cache_mib", strict=True
    )
    fit_margin_mib: Annotated[int, setting("runtime.fit_margin_mib")] = entry(
        "runtime.fit_margin_mib", strict=True
    )
    load_mode: Annotated[LoadMode, setting("runtime.load_mode")] = entry("runtime.load_mode")
    n_gpu_layers: Annotated[int | None, setting("runtime.n_gpu_layers")] = entry(
        "runtime.n_gpu_layers", strict=True
    )
    op_offload: Annotated[bool, setting("runtime.op_offload")] = entry(
        "runtime.op_offload", strict=True
    )

    @model_validator(mode="after")
    def _ubatch_within_batch(self) -> Self:
        if self.ubatch > self.batch:
            raise ValueError(f"ubatch ({self.ubatch}) must not exceed batch ({self.batch})")
        return self


class HostOptions(_Section):
    """The PC the plan is for, when not this computer: it changes only the speed estimate."""

    cpu: Annotated[str | None, setting("host.cpu")] = entry(
        "host.cpu", pattern=r"^[a-z0-9][a-z0-9-]{1,40}$"
    )
    ram: Annotated[str | None, setting("host.ram")] = entry(
        "host.ram", pattern=r"^[A-Za-z0-9./ -]{1,32}$"
    )

    @property
    def is_this_computer(self) -> bool:
        return self.cpu is None and self.ram is None


class ServerOptions(_Section):
    """Where the server listens."""

    host: Annotated[str, setting("server.host")] = entry("server.host")
    port: Annotated[int, setting("server.port")] = entry("server.port", strict=True)
    api_key_file: Annotated[Path | None, setting("server.api_key_file")] = entry(
        "server.api_key_file"
    )

    @field_validator("host")
    @classmethod
    def _host_plain(cls, value: str) -> str:
        if not is_host(value):
            raise ValueError(
                "host must be a plain address: an IP address or a host name (letters, digits, "
                "'-' and '.')"
            )
        return value

    @field_validator("api_key_file")
    @classmethod
    def _key_file_on_one_line(cls, value: Path | None) -> Path | None:
        if value is not None and "\n" in str(value):
            raise ValueError("API key file path must not contain a newline")
        return value

    @property
    def is_loopback(self) -> bool:
        """Only this machine can connect: ``localhost`` or a loopback address (127.0.0.0/8,
        ::1), never a name that merely starts with ``127.``."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


class OutputPaths(_Section):
    """Where generated files go (relative paths are under the export directory)."""

    export_dir: Annotated[Path | None, setting("outputs.export_dir")] = entry("outputs.export_dir")
    service_name: Annotated[str, setting("outputs.service_name")] = entry("outputs.service_name")
    env_file: Annotated[str, setting("outputs.env_file")] = entry("outputs.env_file")
    launch_script: Annotated[str, setting("outputs.launch_script")] = entry("outputs.launch_script")
    short_vram: Annotated[ShortVram, setting("outputs.short_vram")] = entry("outputs.short_vram")

    @field_validator("service_name")
    @classmethod
    def _unit_name(cls, value: str) -> str:
        allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:-_.\\")
        if not value or not set(value) <= allowed or value.startswith("-"):
            raise ValueError(
                "service name may only use letters, digits and : - _ . \\ (systemd unit names; "
                "no @: template units are not written)"
            )
        return value

    @field_validator("env_file", "launch_script")
    @classmethod
    def _file_name(cls, value: str) -> str:
        if not value or "/" in value or "\n" in value or value in {".", ".."}:
            raise ValueError("file names must be plain names without / or newlines")
        return value


MAX_DEVICES = 16
"""More devices than llama.cpp's ``GGML_SCHED_MAX_BACKENDS`` allows in all (16)."""
MAX_DEVICE_MIB = 64 * 1024 * 1024  # 64 TiB: far above any device


class RpcServer(_Section):
    """A remote ``rpc-server`` endpoint (llama.cpp's RPC backend) the model is split onto."""

    host: str = Field(description="Address of the machine running rpc-server.")
    port: int = Field(default=50052, strict=True, description="Its port (rpc-server -p).")
    memory_mib: int | None = Field(
        default=None,
        strict=True,
        description=(
            "The memory the endpoint reported (MiB) when it was probed, or what to plan with "
            "before it is reachable; none: not known yet."
        ),
    )
    free_mib: int | None = Field(
        default=None,
        strict=True,
        description="Of that, what it reported free (MiB); none: all of it.",
    )
    backend: Literal["CPU", "CUDA"] | None = Field(
        default=None,
        description=(
            "What serves it, as its buffer alignment told (CPU: 32 bytes, CUDA: 128); none: "
            "not probed, planned as a CPU."
        ),
    )
    protocol: tuple[int, int, int] | None = Field(
        default=None,
        description=(
            "The RPC protocol it answered when probed (7.0.0: llama.cpp b11434, 8.0.0: b11549); "
            "none: not probed."
        ),
    )

    @field_validator("host")
    @classmethod
    def _host_plain(cls, value: str) -> str:
        if not is_host(value):
            raise ValueError("an RPC host must be a plain address: an IP address or a host name")
        return value

    @field_validator("port")
    @classmethod
    def _port_range(cls, value: int) -> int:
        if not 1 <= value <= 65535:
            raise ValueError("an RPC port must be between 1 and 65535")
        return value

    @field_validator("protocol")
    @classmethod
    def _protocol_range(cls, value: tuple[int, int, int] | None) -> tuple[int, int, int] | None:
        if value is not None and not all(0 <= part <= 255 for part in value):
            raise ValueError("an RPC protocol version is three numbers from 0 to 255")
        return value

    @field_validator("memory_mib", "free_mib")
    @classmethod
    def _memory_range(cls, value: int | None) -> int | None:
        if value is not None and not 0 <= value <= MAX_DEVICE_MIB:
            raise ValueError(f"an RPC memory size must be between 0 and {MAX_DEVICE_MIB} MiB")
        return value

    @model_validator(mode="after")
    def _free_within(self) -> Self:
        free, total = self.free_mib, self.memory_mib
        if free is not None and total is not None and free > total:
            raise ValueError("an RPC endpoint cannot have more free memory than it has")
        return self

    @property
    def endpoint(self) -> str:
        """``host:port`` as ``--rpc`` takes it (an IPv6 address in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


class SplitOptions(_Section):
    """More than one device: further local GPUs, remote rpc-server endpoints, and the split."""

    gpus: Annotated[list[str], setting("split.gpus")] = entry("split.gpus")
    rpc: Annotated[list[RpcServer], setting("split.rpc")] = entry("split.rpc")
    mode: Annotated[SplitMode, setting("split.mode")] = entry("split.mode")
    tensor_split: Annotated[list[int] | None, setting("split.tensor_split")] = entry(
        "split.tensor_split", strict=True
    )
    fit_margins_mib: Annotated[list[int] | None, setting("split.fit_margins_mib")] = entry(
        "split.fit_margins_mib", strict=True
    )

    @field_validator("gpus")
    @classmethod
    def _gpu_ids(cls, value: list[str]) -> list[str]:
        if len(value) >= MAX_DEVICES:
            raise ValueError(f"at most {MAX_DEVICES - 1} further GPUs")
        for gpu in value:
            if not _DEVICE.match(gpu) or gpu in ("auto", "cpu"):
                raise ValueError("a further GPU must be a device id or a catalogue GPU id")
        return value

    @field_validator("rpc")
    @classmethod
    def _rpc_count(cls, value: list[RpcServer]) -> list[RpcServer]:
        if len(value) >= MAX_DEVICES:
            raise ValueError(f"at most {MAX_DEVICES - 1} RPC endpoints")
        seen = [s.endpoint for s in value]
        if len(set(seen)) != len(seen):
            raise ValueError("an RPC endpoint is named twice")
        return value

    @field_validator("tensor_split")
    @classmethod
    def _split_values(cls, value: list[int] | None) -> list[int] | None:
        if value is None:
            return None
        if not value or len(value) > MAX_DEVICES:
            raise ValueError(f"a tensor split names 1 to {MAX_DEVICES} devices")
        if any(not 0 <= x <= MAX_LAYERS for x in value):
            raise ValueError(f"tensor split values must be whole numbers from 0 to {MAX_LAYERS}")
        if not any(value):
            raise ValueError("a tensor split must give some device a share")
        return value

    @field_validator("fit_margins_mib")
    @classmethod
    def _margins(cls, value: list[int] | None) -> list[int] | None:
        if value is None:
            return None
        if not value or len(value) > MAX_DEVICES:
            raise ValueError(f"fit margins name 1 to {MAX_DEVICES} devices")
        if any(not 0 <= x <= MAX_MARGIN_MIB for x in value):
            raise ValueError(f"fit margins must be between 0 and {MAX_MARGIN_MIB} MiB")
        return value

    @property
    def is_default(self) -> bool:
        return self == SplitOptions()


class Plan(_Section):
    """Everything mtpstudio needs to plan, render, launch and benchmark one server."""

    schema_version: Annotated[Literal[2], setting("schema_version")] = entry("schema_version")
    device: Annotated[str, setting("device")] = entry("device")
    model: ModelChoice = Field(default_factory=ModelChoice, description="The model to serve.")
    engine: EngineChoice = Field(default_factory=EngineChoice, description="The engine build.")
    runtime: RuntimeOptions = Field(
        default_factory=RuntimeOptions, description="Context, caches, batches and placement."
    )
    mtp: MtpOptions = Field(default_factory=MtpOptions, description="Multi-token prediction.")
    draft: DraftModelOptions = Field(
        default_factory=DraftModelOptions, description="A separate draft model (instead of MTP)."
    )
    server: ServerOptions = Field(default_factory=ServerOptions, description="Listen address.")
    host: HostOptions = Field(
        default_factory=HostOptions,
        description="Another PC's CPU and RAM for the speed estimate (default: this computer).",
    )

    desktop: Annotated[DesktopReclaim, setting("desktop")] = entry("desktop")
    outputs: OutputPaths = Field(default_factory=OutputPaths, description="Generated files.")
    split: SplitOptions = Field(
        default_factory=SplitOptions,
        description="More devices (GPUs, rpc-server endpoints) and how the model is split.",
    )

    @field_validator("device")
    @classmethod
    def _device_plain(cls, value: str) -> str:
        if not _DEVICE.match(value):
            raise ValueError("device must be 'auto', 'cpu', a device id or a catalogue GPU id")
        return value

    @model_validator(mode="after")
    def _mtp_or_draft_model(self) -> Self:
        if self.draft.path is not None and self.mtp.enabled:
            raise ValueError("draft with MTP or with a draft model, not both: turn MTP off")
        return self

    @model_validator(mode="after")
    def _split_fits_devices(self) -> Self:
        split = self.split
        if split.is_default:
            return self
        if self.device == "cpu" and split.gpus:
            raise ValueError("further GPUs need a GPU as the plan's device, not cpu")
        if len(self.devices_named) > MAX_DEVICES:
            raise ValueError(f"at most {MAX_DEVICES} devices in all")
        if self.device in split.gpus:
            raise ValueError(f"{self.device} is named twice: it is the plan's first device")
        if len(set(split.gpus)) != len(split.gpus):
            raise ValueError("a further GPU is named twice")
        n = self.device_count
        margins = split.fit_margins_mib
        if margins is not None and len(margins) not in (1, n):
            raise ValueError(f"fit margins name {len(margins)} devices; the plan has {n}")
        if split.tensor_split is not None and len(split.tensor_split) != n:
            raise ValueError(
                f"the tensor split names {len(split.tensor_split)} devices; the plan has {n}"
            )
        return self

    @property
    def devices_named(self) -> list[str]:
        """Every device the plan names, in the engine's order: RPC endpoints, then ``device``
        (unless it is the CPU: RPC devices alone) and the further GPUs."""
        local = [] if self.device == "cpu" else [self.device]
        return [s.endpoint for s in self.split.rpc] + local + list(self.split.gpus)

    @property
    def device_count(self) -> int:
        return len(self.devices_named)

    @property
    def is_split(self) -> bool:
        """The model goes to more than the plan's one device: further GPUs or rpc-server
        endpoints (an RPC device alone beside the CPU counts: the engine needs --rpc)."""
        return bool(self.split.rpc or self.split.gpus)

    def to_data(self) -> dict[str, Any]:
        """The plan as it is stored (plan files, benchmark runs): its JSON values, a plan for
        one device without the (default) ``split`` section, as it always was."""
        data = self.model_dump(mode="json")
        if self.split.is_default:
            del data["split"]
        if self.host.is_this_computer:  # stored as before: this computer's plan
            del data["host"]
        if self.mtp.acceptance is None:
            del data["mtp"]["acceptance"]
        return data

    def to_json(self) -> str:
        """The plan as stable, human-readable JSON (sorted keys, two-space indent)."""
        return json.dumps(self.to_data(), indent=2, sort_keys=True) + "\n"


def declared(metadata: list[Any]) -> Setting | None:
    """The :class:`Setting` a field's metadata carries, if any."""
    return next((m for m in metadata if isinstance(m, Setting)), None)


def declared_fields(model: type[BaseModel] = Plan, prefix: str = "") -> dict[str, Setting]:
    """Every field of ``model`` (and its sections) carrying a :class:`Setting`, by dotted
    path: what the Plan validates with, for comparing with ``plan.settings.SETTINGS``."""
    found: dict[str, Setting] = {}
    for name, field in model.model_fields.items():
        here = declared(field.metadata)
        if here is not None:
            found[f"{prefix}{name}"] = here
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found.update(declared_fields(annotation, f"{prefix}{name}."))
    return found
