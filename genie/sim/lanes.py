"""Lanes: the serial resources of one rank, and which lane a node holds while it runs.

A rank of a real job has a host CPU thread and GPU streams; each runs one thing at a time, and
they run in parallel with each other. A node that holds a lane waits, once its dependencies are
done, until the lane is free; lanes hand over in the order their nodes became ready (FIFO; ties
in the engine's event order). The rules, from the node's fields (``lane_key``):

========================================  =====================================================
node                                      lane
========================================  =====================================================
``is_cpu_op`` compute, and host work      ``cpu``: the host thread (PyTorch CPU ops, and the
(launchers of GPU communication,          c10d / record_param_comms launchers of collectives,
``genie.workload.model``)                 which take their duration on the CPU)
GPU node with a ``stream`` attr           ``stream <s>``: compute and communication kernels
                                          alike; a CUDA stream runs its kernels one at a time
GPU compute without ``stream``            ``gpu``: the one compute stream genie always had
                                          (generated traces, ASTRA-sim's microbenchmarks)
GPU communication without ``stream``,     none: not held by any lane. Communication overlaps
memory, metadata and other nodes          compute; its order is the network model's business
========================================  =====================================================

Compared with ASTRA-sim 2.0's ``HardwareResource`` (one CPU op, one GPU compute op and one GPU
communication op in flight per NPU; a RECV takes no slot; streams ignored): genie keeps a lane
per stream where the trace names streams, and leaves communication without a stream unlaned, so
collectives of different process groups may overlap as NCCL communicators do. An issue-order
rule per process group (NCCL's stream semantics) belongs to the communication model, not here.

The engine sees only per-node lane ids (``CompiledRank.lane``, -1 for none) and their names;
this module is the one place that decides them.
"""

from __future__ import annotations

CPU = "cpu"
GPU = "gpu"

#: workload node kinds (``genie.workload.model.NodeKind`` values) that are compute work
_WORK = ("compute", "host")
_COMM = ("collective", "send", "recv")


def lane_key(kind: str, is_cpu_op: bool, stream: int | None) -> str | None:
    """The lane a node of this kind, CPU flag and stream holds, or None (see the table)."""
    if kind in _WORK:
        if kind == "host" or is_cpu_op:
            return CPU
        return GPU if stream is None else f"stream {stream}"
    if kind in _COMM and stream is not None:
        return f"stream {stream}"
    return None
