"""W3C trace context (``traceparent``, https://www.w3.org/TR/trace-context/), as rl-gateway
reads and forwards it: the trace a request belongs to goes into its log lines and problem
bodies, and the inner app sees the same trace with this hop as the parent span."""

from __future__ import annotations

import re
import secrets
from typing import Iterable, NamedTuple, Optional, Tuple

__all__ = ["TRACEPARENT", "TraceContext", "trace_context"]

TRACEPARENT = b"traceparent"
_FORMAT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.DOTALL)


class TraceContext(NamedTuple):
    trace_id: str
    span_id: str
    parent_id: Optional[str]
    flags: str

    @property
    def traceparent(self) -> str:
        """The ``traceparent`` to forward: the same trace, this hop as the parent."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"


def _parse(value: str) -> Optional[Tuple[str, str, str]]:
    m = _FORMAT.fullmatch(value.strip(" \t"))
    if m is None:
        return None
    version, trace_id, parent_id, flags, rest = m.groups()
    if version == "ff" or (version == "00" and rest) or trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    return trace_id, parent_id, flags


def trace_context(headers: Iterable[Tuple[bytes, bytes]]) -> TraceContext:
    """The request's trace: its first ``traceparent`` when valid (lowercase hex, no all-zero
    ids, version ``ff`` refused, version ``00`` exactly 55 characters), else a new sampled
    trace."""
    span_id = secrets.token_hex(8)
    for name, value in headers:
        if name.lower() == TRACEPARENT:
            parsed = _parse(value.decode("latin-1"))
            if parsed is not None:
                trace_id, parent_id, flags = parsed
                return TraceContext(trace_id, span_id, parent_id, flags)
            break
    return TraceContext(secrets.token_hex(16), span_id, None, "01")
