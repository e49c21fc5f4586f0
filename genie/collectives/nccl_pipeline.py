"""NCCL's chunk schedule per algorithm, and the pipeline fill it costs a tree-shaped collective.

A tree (NCCL's double binary tree, a chain inside each node), NVLS and NVLSTree move a channel's
data as a stream of chunks through a pipeline of stages (hops up and down the tree; NVLS's
scatter, reduction and multicast, and gather). ``latency + bytes / rate`` prices the stream
as if the first chunk cost nothing to bring through. A stage that forwards whole chunks (store
and forward) holds the stream back by one chunk: a network hop for every protocol (the proxy
posts a send once the GPU has filled a FIFO step), a hop inside a node for Simple (the peer
sees a step when its flag is set); LL and LL128 inside a node forward line by line (every 8-
or 128-byte line carries its own flag), which costs no chunk. A stage's grain is what a
channel moves through it per loop: one chunk on a tree; on NVLS and NVLSTree one chunk for each
NVLS head (the node's GPUs: a channel's scatter and gather warps move ``nHeads`` chunks a loop,
``nchunksPerLoop = nHeads`` in ``calcCollChunking``), so a mid-size NVLS message is a few loops
and its fill is a large part of its time. Stages of times t_i end sum(t_i) - max(t_i) after
the busiest alone says ((D - 1) grain-times where all run at one rate; stages inside a node at
the node's rate, network hops at the NICs'), a grain-time being the grain's bytes at the
channel's share of the rate. NCCL chooses its chunk by size (smaller chunks for smaller
messages, ``calcCollChunking``), so the fill is nothing for tiny messages, grows with the chunk
through the middle sizes and stops at the largest chunk, where it is a small part of a large
transfer. The ring has no fill: every rank sends from the first step on.

NCCL's rules (NVIDIA/nccl 2.30.7, ``src/enqueue.cc`` ``calcCollChunking``; facts, not code):
chunk = one FIFO step of the protocol's buffer (``genie.collectives.nccl_wire``: LL half of it,
LL128 15/16 of it); tree LL128 halves it while a channel holds fewer than
``(1 + log2 nodes + ppn / 10) x 64 / ppn`` chunks (not below 128 KiB) and ``x 16 / ppn`` (not
below 32 KiB); NVLS caps it at ``nvlsChunkSize`` (128 KiB) and cuts it to 64 / 32 / 16 KiB
below 64 / 8 / 2 chunks per concurrent operation (channels x heads); NVLSTree starts from
64 KiB on four nodes or more (``src/transport/nvls.cc``) and cuts to 256 / 128 / 64 / 32 KiB
below 32 / 16 / 4 / 1.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from genie.collectives.nccl_wire import BUFFSIZE, LL, LL128, NCCL_STEPS, SIMPLE, NcclStyle
from genie.collectives.nccl_wire import chunk_bytes as wire_chunk_bytes

if TYPE_CHECKING:
    from genie.collectives.nccl_model import System

NVLS_CHUNK = 128 << 10  # nvlsChunkSize's default (NCCL_NVLS_CHUNKSIZE)
#: NVLSTree's largest chunk from four nodes on (``nvlsTreeMaxChunkSize``, ``ncclNvlsTuning`` in
#: src/transport/nvls.cc; Blackwell's multi-node table, which sets it by NIC rate, not modelled)
NVLSTREE_MAX_CHUNK_4_NODES = 64 << 10
_PROTO = {"LL": LL, "LL128": LL128, "Simple": SIMPLE}
_WIRE_NAME = {"LL": "ll", "LL128": "ll128", "Simple": "simple"}
#: NVLS: (chunks per concurrent operation, chunk size it falls to below that), in order.
_NVLS_CUTS = ((64, 65536), (8, 32768), (2, 16384))
_NVLSTREE_CUTS = ((32, 262144), (16, 131072), (4, 65536), (1, 32768))


def ring_chunk_bytes(proto: str) -> int:
    """Data bytes of a ring's full chunk under ``proto`` with NCCL's default buffers (Simple
    2 MiB, LL 32 KiB, LL128 576,000 B; ``genie.collectives.nccl_wire.chunk_bytes``)."""
    return wire_chunk_bytes(NcclStyle(1, _WIRE_NAME[proto]))


def chunk_bytes(size: int, sys: System, algo: str, proto: str, channels: int) -> int:
    """Data bytes of one chunk NCCL moves for a ``size``-byte collective (tree, NVLS, NVLSTree)."""
    step = BUFFSIZE[_PROTO[proto]] // NCCL_STEPS
    c = step // 2 if proto == "LL" else step // 16 * 15 if proto == "LL128" else step
    g = sys.gpus_per_node
    if algo == "tree" and proto == "LL128":
        steps = 1 + int(math.log2(sys.nodes)) + 0.1 * g
        while size // (channels * c) < steps * 64 / g and c > 131072:
            c //= 2
        while size // (channels * c) < steps * 16 / g and c > 32768:
            c //= 2
    elif algo in ("nvls", "nvlstree"):
        c = min(c, NVLS_CHUNK)
        if algo == "nvlstree" and sys.nodes >= 4:
            c = min(c, NVLSTREE_MAX_CHUNK_4_NODES)
        ops = channels * g  # concurrent operations: channels x NVLS heads (a node's GPUs)
        for per_op, floor in _NVLS_CUTS if algo == "nvls" else _NVLSTREE_CUTS:
            if size < per_op * ops * c and c > floor:
                c = floor
    return c


def stages(sys: System, algo: str, proto: str, coll: str = "all_reduce") -> tuple[int, int]:
    """(stages inside a node, stages across the network) that forward whole chunks: a tree's
    hops up and down across nodes (ceil(log2 nodes) each way) and, with Simple, along the chain
    of a node's GPUs; NVLS's warp groups on one node (all-reduce: scatter to the heads, reduce
    and multicast through the switch, gather: 3; all-gather: multicast, gather; reduce-scatter:
    scatter, reduce: 2); NVLSTree's (scatter, reduce and send up the tree, receive and
    multicast, gather: 4) plus the tree's network hops; one for the rest. The warp groups are
    NCCL's (``src/device/all_reduce.h``, ``all_gather.h``, ``reduce_scatter.h``,
    ``RunWorkColl`` for NVLS and NVLS_TREE): each is a Simple primitive that posts a whole
    chunk before the next group takes it."""
    across = math.ceil(math.log2(sys.nodes)) if sys.nodes > 1 else 0
    if algo == "tree":
        inside = sys.gpus_per_node - 1 if proto == "Simple" else 0
        return 2 * inside, 2 * across
    if algo == "nvls":
        return (3 if coll == "all_reduce" else 2), 0
    if algo == "nvlstree":
        return 4, 2 * across
    return 1, 0


def depth(sys: System, algo: str, proto: str, coll: str = "all_reduce") -> int:
    """Stages that forward whole chunks, inside a node and across (``stages``)."""
    return sum(stages(sys, algo, proto, coll))


def fill_seconds(
    size: int,
    sys: System,
    algo: str,
    proto: str,
    channels: int,
    rates: tuple[float, float],
    coll: str = "all_reduce",
) -> float:
    """Seconds the pipeline's fill adds to ``latency + bytes / rate``. ``rates``: bytes/s of
    the whole collective, shared by ``channels``, on the stages inside a node and on those
    across the network. A stream of chunks through stages of times t_i ends sum(t_i) - max(t_i)
    after its busiest stage alone says (the first chunk crosses every stage; the busiest then
    paces the rest): (D - 1) chunk-times where the stages run at one rate."""
    inside, across = stages(sys, algo, proto, coll)
    if inside + across <= 1 or size <= 0 or channels <= 0 or min(rates) <= 0:
        return 0.0
    grain = chunk_bytes(size, sys, algo, proto, channels) * chunks_per_loop(sys, algo)
    per_channel = min(float(grain), size / channels)
    times = [per_channel / (rates[0] / channels)] * inside
    times += [per_channel / (rates[1] / channels)] * across
    return sum(times) - max(times)


def chunks_per_loop(sys: System, algo: str) -> int:
    """Chunks a channel moves through each stage per loop: NVLS and NVLSTree one for each NVLS
    head (a node's GPUs: each channel scatters and gathers ``nHeads`` chunks a loop, the heads
    reduce one each; ``calcCollChunking``'s ``nchunksPerLoop``, ``src/device/all_reduce.h``),
    the tree one."""
    return sys.gpus_per_node if algo in ("nvls", "nvlstree") else 1
