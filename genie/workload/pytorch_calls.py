"""The call tree of a PyTorch host trace, and each CPU operator's own time read from it.

Helpers of the PyTorch import (``genie.workload.pytorch_import``): which operators an operator
called and was called by, the inputs of an operator by recorded type, and an operator's own
time (Kineto's or the host trace's duration less its callees'; backend markers take none).
"""

from __future__ import annotations

import re
from typing import Any

from genie.workload.pytorch_trace import HostOp, HostTrace, KinetoTrace

_BACKEND_MARK = re.compile(r"^(nccl|gloo|mpi|ucc|xccl|hccl):[a-z_]+$")


class CallTree:
    """The call tree of a host trace: children in call order, depth-first order."""

    def __init__(self, host: HostTrace) -> None:
        self.by_id = {op.id: op for op in host.ops}
        self.children: dict[int, list[HostOp]] = {}
        for op in host.ops:
            if op.parent is not None and op.parent in self.by_id and op.parent != op.id:
                self.children.setdefault(op.parent, []).append(op)

    def subtree(self, op: HostOp) -> list[HostOp]:
        """``op`` and everything it called, in call order (bounded depth)."""
        out: list[HostOp] = []
        stack = [(op, 0)]
        while stack:
            o, d = stack.pop()
            out.append(o)
            if d < 64:
                stack += [(c, d + 1) for c in reversed(self.children.get(o.id, []))]
        return out

    def ancestors(self, op: HostOp) -> list[HostOp]:
        """The operators that called ``op``, innermost first."""
        out: list[HostOp] = []
        seen = {op.id}
        p = op.parent
        while p is not None and p in self.by_id and p not in seen and len(out) < 256:
            seen.add(p)
            out.append(self.by_id[p])
            p = self.by_id[p].parent
        return out


def typed(op: HostOp, prefix: str) -> list[Any]:
    """The input values of ``op`` whose recorded type starts with ``prefix``."""
    return [v for v, t in zip(op.in_values, op.in_types, strict=False) if t.startswith(prefix)]


def cpu_durations(
    ops: list[HostOp], tree: CallTree, kineto: KinetoTrace | None
) -> tuple[dict[int, float], str]:
    """Each CPU operator's own time (us) and where the numbers came from."""
    incl: dict[int, float] = {}
    source = "nowhere (no Kineto trace, no durations in the host trace): 0"
    if kineto is not None and kineto.cpu_dur:
        for op in ops:
            if op.rf_id is not None and op.rf_id in kineto.cpu_dur:
                incl[op.id] = kineto.cpu_dur[op.rf_id]
        source = "the Kineto trace (each operator's time less its callees')"
    elif any(op.inclusive_us is not None or op.exclusive_us is not None for op in ops):
        out = {op.id: op.exclusive_us or 0.0 for op in ops if op.exclusive_us is not None}
        if out:
            return out, "the host trace's exclusive_dur"
        incl = {op.id: op.inclusive_us for op in ops if op.inclusive_us is not None}
        source = "the host trace's inclusive_dur (less callees')"
    out = {}
    for op in ops:
        if op.id not in incl or _BACKEND_MARK.match(op.name):
            continue
        callees = sum(
            incl.get(c.id, 0.0)
            for c in tree.children.get(op.id, [])
            if not _BACKEND_MARK.match(c.name) and c.tid == op.tid
        )
        out[op.id] = max(0.0, incl[op.id] - callees)
    return out, source
