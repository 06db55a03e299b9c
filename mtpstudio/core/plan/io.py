"""A Plan read and written: from plain data (older schema versions migrated), with dotted-path
changes, from JSON text and files, and saved atomically; pydantic's report in sentences."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mtpstudio.core.atomic import write_text_atomic
from mtpstudio.core.errors import PlanError
from mtpstudio.core.file_check import refuse_model_as
from mtpstudio.core.plan.schema import SCHEMA_VERSION, Plan
from mtpstudio.core.state_files import StateFileError, parse_json, read_json

READABLE_SCHEMA_VERSIONS = (1, 2)
MAX_PLAN_BYTES = 1024 * 1024


def describe_validation_error(error: ValidationError) -> str:
    """Turn pydantic's report into sentences like 'runtime.ctx: ctx must be at least 256'."""
    parts: list[str] = []
    for item in error.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"])
        ctx = item.get("ctx") or {}
        if item["type"] == "value_error" and "error" in ctx:
            message = str(ctx["error"])
        elif item["type"] == "extra_forbidden":
            message = "unknown setting"
        elif item["type"] == "missing":
            message = "missing"
        else:
            message = item["msg"][:1].lower() + item["msg"][1:]
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def plan_from_dict(data: dict[str, Any]) -> Plan:
    """Validate plain data into a Plan, raising PlanError with readable messages."""
    version = data.get("schema_version", SCHEMA_VERSION)
    if version not in READABLE_SCHEMA_VERSIONS:
        raise PlanError(
            f"plan schema_version {version!r} is not supported (this mtpstudio reads "
            f"{', '.join(str(v) for v in READABLE_SCHEMA_VERSIONS)})",
            hint="Upgrade mtpstudio or recreate the plan.",
        )
    if version == 1:
        data = _migrate_v1(data)
    _refuse_plain_key(data)
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        raise PlanError(f"invalid plan: {describe_validation_error(exc)}") from None


def _migrate_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 plan as version 2.

    Version 1 had no MTP auto: ``"enabled": true`` was its default, written into every file, so
    it becomes auto (on wherever MTP can run, which is what such a file meant); ``false`` stays
    off. Version 1 could hold the API key itself; version 2 never does, so such a file is
    refused with what to do rather than the key being dropped or kept in the plan.
    """
    out: dict[str, Any] = json.loads(json.dumps(data))
    out["schema_version"] = SCHEMA_VERSION
    mtp = out.get("mtp")
    if isinstance(mtp, dict) and mtp.get("enabled") is True:
        mtp["enabled"] = None
    server = out.get("server")
    if isinstance(server, dict) and server.get("api_key", 0) is None:
        del server["api_key"]  # no key: nothing to move
    return out


def _refuse_plain_key(data: dict[str, Any]) -> None:
    server = data.get("server")
    if isinstance(server, dict) and "api_key" in server:
        raise PlanError(
            "this plan keeps its API key in plain text, which mtpstudio no longer does",
            hint="Put the key in a user-only file (umask 077; printf '%s\\n' KEY > FILE), "
            'then replace "api_key" in the plan with "api_key_file": "FILE".',
        )


def plan_with(plan: Plan, changes: dict[str, Any]) -> Plan:
    """A new Plan with dotted-path changes applied (``{"runtime.ctx": 8192}``), validated.

    Raises:
        PlanError: the result is not a valid Plan (readable message).
    """
    data = plan.model_dump(mode="json")
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return plan_from_dict(data)


def _plan_object(data: Any) -> Plan:
    if not isinstance(data, dict):
        raise PlanError("plan must be a JSON object")
    return plan_from_dict(data)


def plan_from_json(text: str) -> Plan:
    """Parse a Plan from JSON text (nested at most ``state_files.MAX_DEPTH`` deep)."""
    try:
        return _plan_object(parse_json(text, "plan"))
    except StateFileError as exc:
        raise PlanError(str(exc)) from None


def load_plan(path: Path) -> Plan:
    """Read a Plan file (a regular file of at most 1 MiB; a GGUF model is named, unread)."""
    refuse_model_as(path, "plan file")
    try:
        data = read_json(path, "plan file", max_bytes=MAX_PLAN_BYTES)
    except StateFileError as exc:
        raise PlanError(str(exc), hint="Save the plan again with `mtpstudio plan`.") from None
    if data is None:
        raise PlanError(f"plan file {path} does not exist")
    return _plan_object(data)


def save_plan(plan: Plan, path: Path) -> None:
    """Write a Plan atomically (temp file in the same folder, then rename)."""
    write_text_atomic(path, plan.to_json())
