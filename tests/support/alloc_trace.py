"""The engine's allocator traces: ggml-alloc.c's AT_PRINTF lines, recorded in
``tests/fixtures/engine_logs``, read back as the replayed allocator's events."""

from __future__ import annotations

import re
from pathlib import Path

from mtpstudio.core.memory.graph_alloc import AllocEvent

ENGINE_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "engine_logs"

_TRACE_LINE = re.compile(
    r"ggml_dyn_tallocr_alloc: allocating .* \((\d+) bytes\) - block \d+, offset (\d+)"
    r"|ggml_gallocr_free_node: freeing .* at \{chunk=0, offset=(\d+)\} \((\d+) bytes\)"
)


def engine_trace(path: Path) -> list[AllocEvent]:
    events: list[AllocEvent] = []
    for line in path.read_text().splitlines():
        m = _TRACE_LINE.match(line)
        if m and m.group(1):
            events.append(("alloc", int(m.group(1)), int(m.group(2))))
        elif m:
            events.append(("free", int(m.group(4)), int(m.group(3))))
    return events
