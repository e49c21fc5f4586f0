"""Whether the network can matter at all: a structural check of a compiled workload.

When no node waits for communication and no communication waits for GPU compute (it waits at
most for its CPU launch), collectives run beside the compute from the start of the step and
delay nothing: the iteration is the compute unless communication alone outlasts it, whatever
the bandwidth. That is rarely what the job ran; a PyTorch-derived trace replayed with its own
edges only (``--trace-edges explicit``) or a trace whose converter lost the stream edges looks
like this. ``network_cannot_matter`` says so, in one line, or returns None.
"""

from __future__ import annotations

import numpy as np

from genie.sim.compiled import CompiledRank, CompiledWorkload, Kind
from genie.sim.lanes import CPU as CPU_LANE

_COMM = (Kind.COLLECTIVE, Kind.SEND, Kind.RECV)


def network_cannot_matter(cw: CompiledWorkload) -> str | None:
    """Why the network cannot delay any computation of ``cw``, or None when it can."""
    has_comm = has_gpu_work = False
    for cr in cw.ranks:
        comm = np.isin(cr.kind, _COMM)
        gpu = _gpu_compute(cr)
        has_comm |= bool(comm.any())
        has_gpu_work |= bool((gpu & (cr.duration > 0)).any())
        owner = np.repeat(np.arange(cr.n_nodes), np.diff(cr.dep_ptr))
        # a node that is not communication waits for a communication node
        if bool((comm[cr.dep_idx] & ~comm[owner]).any()):
            return None
        if bool((gpu[cr.dep_idx] & comm[owner]).any()) or _comm_after_gpu(cr, comm, gpu):
            return None
    if not (has_comm and has_gpu_work):
        return None
    return (
        "the network cannot delay any computation here: no node waits for communication and no "
        "communication waits for GPU compute (at most for its CPU launch), so collectives run "
        "beside the compute from the start and the iteration is the compute unless "
        "communication alone outlasts it, at any bandwidth. PyTorch runs a kernel after the "
        "kernels launched before it on its stream, and a collective after the compute launched "
        "before it: a PyTorch-derived trace is replayed that way unless --trace-edges explicit"
    )


def _gpu_compute(cr: CompiledRank) -> np.ndarray:
    """Compute and memory nodes not on the CPU lane."""
    work = np.isin(cr.kind, (Kind.COMPUTE, Kind.MEMORY))
    if CPU_LANE in cr.lane_names:
        work &= cr.lane != cr.lane_names.index(CPU_LANE)
    return work


def _comm_after_gpu(cr: CompiledRank, comm: np.ndarray, gpu: np.ndarray) -> bool:
    """True when some communication node depends, directly or not, on GPU compute."""
    if not comm.any() or not gpu.any():
        return False
    # walk back from the communication nodes over the dependencies
    ptr, idx = cr.dep_ptr, cr.dep_idx
    seen = np.zeros(cr.n_nodes, bool)
    stack = np.flatnonzero(comm).tolist()
    seen[stack] = True
    while stack:
        v = stack.pop()
        for d in idx[ptr[v] : ptr[v + 1]].tolist():
            if gpu[d]:
                return True
            if not seen[d]:
                seen[d] = True
                stack.append(d)
    return False
