"""A trace shaped like Chakra's PyTorch converter output (``chakra_converter PyTorch``).

For tests and benchmarks of real-trace handling, not a model of a particular job. Per rank, as
the converter writes it (``src/converter/pytorch_converter.py``):

* a METADATA node ``## process_group:init ##`` whose ``inputs.values`` is the ``str()`` of a
  one-element list holding PyTorch's JSON list of process groups (``pg_name``, ``pg_desc``,
  ``backend_config``, ``pg_size``, ``ranks``): ``"0"`` every rank, ``"1"``/``"2"`` the even and
  the odd ranks;
* per step a ``ProfilerStep#<s>`` CPU node (PyTorch's iteration marker), whose ctrl_dep names
  the thread's root node, which the converter dropped as dangling (a missing id), as does the
  METADATA node's;
* CPU ops (``aten::*``, autograd functions) as COMP nodes with ``is_cpu_op`` true, chained by
  data_deps in call order, each with a ctrl_dep on its caller (the step's marker, or for
  ``record_param_comms`` its ``c10d`` launcher);
* GPU kernels as COMP nodes with ``is_cpu_op`` false and ``stream`` 7, data-dependent on their
  launching CPU op;
* per gradient bucket the host-side ``c10d::allreduce_`` (COMM_COLL, ``is_cpu_op`` true, no
  comm_type) with its child ``record_param_comms`` (COMP on the CPU), then the GPU kernel
  ``ncclDevKernel_AllReduce_*`` (COMM_COLL with comm_type, comm_size, pg_name ``"0"``, stream 20);
  once per step an all-gather over the rank's parity group on stream 24;
* a CPU synchronisation op at the end of a step that waits for the last GPU kernels;
* every node with the converter's attrs (``rf_id``, ``fw_parent``, ``seq_id``, ``scope``,
  ``tid``, ``fw_tid``, ``op_schema``, ``is_cpu_op``, ``stream``) and IOInfo strings; node ids
  as the converter sorts them: CPU ops numbered in call order, GPU kernels (ids given by the
  trace linker) after all of them, so a synchronisation op's dependency on a kernel points
  forward in the file.
"""

from __future__ import annotations

import json
from typing import TypedDict

from genie.workload.generators.builder import need
from genie.workload.model import (
    DEFAULT_VERSION,
    Attr,
    CollectiveType,
    IOInfo,
    Metadata,
    Node,
    NodeType,
    RankGraph,
    Workload,
)

ROOT_ID = 1  # the thread root "[pytorch|profiler|execution_trace|thread]", not in the file
COMPUTE_STREAM, DP_STREAM, TP_STREAM = 7, 20, 24
_GPU_BASE = 1 << 30  # first GPU kernel id (after every CPU op id)


class ProcessGroupRecord(TypedDict):
    """One process group as PyTorch's execution trace records it."""

    pg_name: str
    pg_desc: str
    ranks: list[int]
    backend_config: str
    pg_size: int


def process_groups(ranks: int) -> list[ProcessGroupRecord]:
    """PyTorch's process-group records: the default group and the two parity groups."""

    def record(name: str, desc: str, members: list[int]) -> ProcessGroupRecord:
        return {
            "pg_name": name,
            "pg_desc": desc,
            "ranks": members,
            "backend_config": "cuda:nccl",
            "pg_size": len(members),
        }

    out = [record("0", "default_pg", list(range(ranks)))]
    for k, desc in ((1, "even"), (2, "odd")):
        out.append(record(str(k), desc, [r for r in range(ranks) if r % 2 == k - 1]))
    return out


class _Rank:
    """Emits one rank's nodes with the converter's attrs."""

    def __init__(self) -> None:
        self.cpu: list[Node] = []
        self.gpu: list[Node] = []
        self.next_cpu = ROOT_ID + 1
        self.last_cpu: int | None = None
        self.parent = ROOT_ID  # caller of the next CPU ops

    def _attrs(self, cpu: bool, rf: int, schema: str = "") -> list[Attr]:
        return [
            Attr("rf_id", "int64_val", rf),
            Attr("fw_parent", "int64_val", 0),
            Attr("seq_id", "int64_val", -1),
            Attr("scope", "int64_val", 0),
            Attr("tid", "int64_val", 1 if cpu else 0),
            Attr("fw_tid", "int64_val", 0),
            Attr("op_schema", "string_val", schema),
            Attr("is_cpu_op", "bool_val", cpu),
        ]

    def cpu_op(
        self, name: str, us: int, type_=NodeType.COMP_NODE, parent: int | None = None
    ) -> int:
        """A CPU op after the previous one, called by ``parent`` (default: the current one)."""
        parent = self.parent if parent is None else parent
        nid = self.next_cpu
        self.next_cpu += 1
        deps = [self.last_cpu] if self.last_cpu is not None else []
        n = Node(
            nid,
            name,
            type_,
            data_deps=deps,
            ctrl_deps=[parent],
            duration_micros=us,
            inputs=IOInfo(f"[[{nid}, {nid + 1}, 0, 4096, 2, 'cuda:0']]", "[[4096]]", "['Tensor']"),
            outputs=IOInfo(f"[[{nid + 2}, 0, 0, 4096, 2, 'cuda:0']]", "[[4096]]", "['Tensor']"),
            attrs=self._attrs(True, nid, f"{name}(Tensor self) -> Tensor"),
        )
        self.cpu.append(n)
        self.last_cpu = nid
        return nid

    def kernel(self, name: str, us: int, launcher: int, stream: int, comm=None) -> int:
        """A GPU kernel launched by CPU op ``launcher`` on ``stream``; its id."""
        nid = _GPU_BASE + len(self.gpu)
        attrs = [*self._attrs(False, nid), Attr("stream", "int64_val", stream)]
        t = NodeType.COMP_NODE
        if comm is not None:
            ctype, size, pg = comm
            t = NodeType.COMM_COLL_NODE
            attrs += [
                Attr("comm_type", "int64_val", int(ctype)),
                Attr("comm_size", "int64_val", size),
                Attr("pg_name", "string_val", pg),
            ]
        n = Node(
            nid,
            name,
            t,
            data_deps=[launcher],
            ctrl_deps=[launcher],
            duration_micros=us,
            inputs=IOInfo("[]", "[]", "[]"),
            outputs=IOInfo("[]", "[]", "[]"),
            attrs=attrs,
        )
        self.gpu.append(n)
        return nid


def pytorch_style(
    ranks: int = 4,
    layers: int = 8,
    steps: int = 1,
    bucket_layers: int = 2,
    grad_bytes: int = 8 * 2**20,
) -> Workload:
    """``steps`` training steps of a ``layers``-layer model, on every rank alike."""
    need(ranks >= 2 and ranks % 2 == 0, f"ranks must be even and >= 2, got {ranks}")
    need(layers >= 1 and steps >= 1 and bucket_layers >= 1, "sizes must be >= 1")
    pgs = process_groups(ranks)
    rank_graphs = [
        pytorch_style_rank(r, ranks, layers, steps, bucket_layers, grad_bytes) for r in range(ranks)
    ]
    groups = {g["pg_name"]: tuple(g["ranks"]) for g in pgs}
    return Workload(ranks=rank_graphs, groups=groups, name="pytorch_style")


def pytorch_style_rank(
    r: int,
    ranks: int = 4,
    layers: int = 8,
    steps: int = 1,
    bucket_layers: int = 2,
    grad_bytes: int = 8 * 2**20,
) -> RankGraph:
    """Rank ``r`` of ``pytorch_style(ranks, ...)`` alone (ranks of one parity are alike)."""
    need(ranks >= 2 and ranks % 2 == 0, f"ranks must be even and >= 2, got {ranks}")
    need(0 <= r < ranks, f"rank {r} is not one of 0..{ranks - 1}")
    need(layers >= 1 and steps >= 1 and bucket_layers >= 1, "sizes must be >= 1")
    pgs = process_groups(ranks)
    b = _Rank()
    meta = b.cpu_op("## process_group:init ##", 0, NodeType.METADATA_NODE)
    b.cpu[-1].inputs = IOInfo(str([json.dumps(pgs)]), "[[]]", "['String']")
    b.last_cpu = meta
    for s in range(steps):
        last_comm: list[int] = []
        step = b.cpu_op(f"ProfilerStep#{s}", 1)
        b.parent = step
        for layer in range(layers):
            op = b.cpu_op("aten::linear", 20 + layer % 3)
            last = b.kernel(f"sm90_gemm_fwd_s{s}_l{layer}", 150, op, COMPUTE_STREAM)
        for k, layer in enumerate(reversed(range(layers))):
            op = b.cpu_op("autograd::engine::evaluate_function: AddmmBackward0", 30)
            last = b.kernel(f"sm90_gemm_bwd_s{s}_l{layer}", 300, op, COMPUTE_STREAM)
            if (k + 1) % bucket_layers == 0 or layer == 0:
                c10d = b.cpu_op("c10d::allreduce_", 12, NodeType.COMM_COLL_NODE)
                rpc = b.cpu_op("record_param_comms", 3, parent=c10d)
                size = grad_bytes * min(bucket_layers, k % bucket_layers + 1)
                last_comm.append(
                    b.kernel(
                        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                        400,
                        rpc,
                        DP_STREAM,
                        (CollectiveType.ALL_REDUCE, size, "0"),
                    )
                )
        c10d = b.cpu_op("c10d::_allgather_base_", 10, NodeType.COMM_COLL_NODE)
        rpc = b.cpu_op("record_param_comms", 3, parent=c10d)
        last_comm.append(
            b.kernel(
                "ncclDevKernel_AllGather_RING_LL",
                200,
                rpc,
                TP_STREAM,
                (CollectiveType.ALL_GATHER, grad_bytes // 4, str(1 + r % 2)),
            )
        )
        b.cpu_op("Optimizer.step#AdamW.step", 0)
        b.cpu_op("aten::_local_scalar_dense", 5)
        b.cpu[-1].data_deps += [last, *last_comm]  # waits for the GPU: forward deps
        b.parent = ROOT_ID
    md = Metadata(DEFAULT_VERSION, [Attr("schema", "string_val", "1.1.1-chakra.0.0.4")])
    return RankGraph(r, b.cpu + b.gpu, md)
