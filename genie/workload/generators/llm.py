"""A transformer LLM training step with tensor (TP), pipeline (PP) and data (DP) parallelism.

Ranks are laid out Megatron-style, TP fastest: ``rank = (d * pp + p) * tp + t``. Each pipeline
stage holds ``layers / pp`` transformer blocks; micro-batches run GPipe-style (all forwards, then
all backwards in reverse). Per block and micro-batch: attention and MLP compute (FLOPs
``24 b s h^2 + 4 b s^2 h`` forward, twice that backward, split over TP) each followed by a TP
all-reduce of the activations (``b s h`` elements); stage boundaries send activations forward
and gradients backward. Gradients are synchronised over DP per block as soon as its last
backward is done: an all-reduce, or with ``zero`` a reduce-scatter before the optimizer and an
all-gather of the updated shard after it (ZeRO/FSDP). With ``dp_sync="rs_ag"`` the all-reduce is
written as the reduce-scatter and all-gather it consists of (a ring all-reduce is exactly these
two phases, the same bytes in the same steps), both before the optimizer: ASTRA-sim 2.0 crashes
when a rank runs one collective type in two process groups smaller than the world
(``genie.workload.astra``), which TP and DP all-reduces would be. Embeddings and the LM head
are left out.
"""

from __future__ import annotations

from genie.workload.generators.builder import H100_BF16_FLOPS, RankBuilder, finish, need
from genie.workload.model import CollectiveType, Workload


def rank_of(d: int, p: int, t: int, tp: int, pp: int) -> int:
    """Global rank of data-parallel index d, stage p, tensor index t."""
    return (d * pp + p) * tp + t


def llm(
    ranks: int,
    tp: int = 2,
    pp: int = 2,
    layers: int = 8,
    hidden: int = 4096,
    seq: int = 2048,
    micro_batches: int = 4,
    micro_batch_size: int = 1,
    dtype_bytes: int = 2,
    zero: bool = False,
    peak_flops: float = H100_BF16_FLOPS,
    efficiency: float = 0.5,
    dp_sync: str = "all_reduce",
) -> Workload:
    """One training step of a ``layers``-block transformer over ``ranks = dp x pp x tp``."""
    need(dp_sync in ("all_reduce", "rs_ag"), f"dp_sync is all_reduce or rs_ag, not {dp_sync!r}")
    need(tp >= 1 and pp >= 1, "tp and pp must be >= 1")
    need(ranks % (tp * pp) == 0, f"ranks ({ranks}) must be a multiple of tp x pp ({tp * pp})")
    dp = ranks // (tp * pp)
    need(layers % pp == 0, f"layers ({layers}) must divide evenly over pp ({pp}) stages")
    need(hidden % tp == 0, f"hidden ({hidden}) must divide evenly over tp ({tp})")
    need(micro_batches >= 1 and micro_batch_size >= 1 and seq >= 1, "sizes must be >= 1")
    need(0 < efficiency <= 1, f"efficiency must be in (0, 1], got {efficiency}")
    need(ranks >= 2, f"llm needs at least 2 ranks, got {ranks}")
    b, s, h = micro_batch_size, seq, hidden
    rate = peak_flops * efficiency
    block_fwd = (24 * b * s * h * h + 4 * b * s * s * h) / tp
    half_fwd = block_fwd / 2  # attention and MLP halves
    act = b * s * h * dtype_bytes  # activation / TP all-reduce buffer, bytes
    block_params = 12 * h * h // tp
    grad = block_params * dtype_bytes
    per_stage = layers // pp

    groups: dict[str, tuple[int, ...]] = {}
    for d in range(dp):
        for p in range(pp):
            if tp > 1:
                groups[f"tp_d{d}_p{p}"] = tuple(rank_of(d, p, t, tp, pp) for t in range(tp))
    for p in range(pp):
        for t in range(tp):
            if dp > 1:
                groups[f"dp_p{p}_t{t}"] = tuple(rank_of(d, p, t, tp, pp) for d in range(dp))

    builders = []
    protos: dict = {}  # nodes the ranks repeat, made once (RankBuilder)
    for r in range(ranks):
        t = r % tp
        p = (r // tp) % pp
        d = r // (tp * pp)
        rb = RankBuilder(r, protos)
        tp_group = f"tp_d{d}_p{p}"
        prev_stage = rank_of(d, p - 1, t, tp, pp) if p > 0 else None
        next_stage = rank_of(d, p + 1, t, tp, pp) if p + 1 < pp else None
        last = None  # the compute stream is serial
        first_block = p * per_stage

        def half(name: str, flops: float, deps: list, rb=rb, tp_group=tp_group) -> int:
            nonlocal last
            last = rb.compute(name, flops / rate, [last, *deps], flops=flops, tensor_bytes=act)
            if tp > 1:
                last = rb.collective(
                    f"{name}_tp_allreduce", CollectiveType.ALL_REDUCE, act, [last], tp_group
                )
            return last

        for m in range(micro_batches):
            dep = []
            if prev_stage is not None:
                dep = [rb.recv(f"recv_act_mb{m}", prev_stage, act, tag=m)]
            for k in range(per_stage):
                layer = first_block + k
                half(f"fwd_L{layer}_attn_mb{m}", half_fwd, dep)
                dep = []
                half(f"fwd_L{layer}_mlp_mb{m}", half_fwd, [])
            if next_stage is not None:
                rb.send(f"send_act_mb{m}", next_stage, act, tag=m, deps=[last])
        last_bwd: dict[int, int] = {}
        for m in reversed(range(micro_batches)):
            dep = []
            if next_stage is not None:
                dep = [rb.recv(f"recv_grad_mb{m}", next_stage, act, tag=10_000 + m)]
            for k in reversed(range(per_stage)):
                layer = first_block + k
                half(f"bwd_L{layer}_mlp_mb{m}", 2 * half_fwd, dep)
                dep = []
                attn = half(f"bwd_L{layer}_attn_mb{m}", 2 * half_fwd, [])
                if m == 0:
                    last_bwd[layer] = attn
            if prev_stage is not None:
                rb.send(f"send_grad_mb{m}", prev_stage, act, tag=10_000 + m, deps=[last])
        dp_group = f"dp_p{p}_t{t}"
        syncs = []
        for layer in sorted(last_bwd, reverse=True):
            if dp == 1:
                continue
            split = zero or dp_sync == "rs_ag"
            ctype = CollectiveType.REDUCE_SCATTER if split else CollectiveType.ALL_REDUCE
            sync = rb.collective(f"dp_grad_L{layer}", ctype, grad, [last_bwd[layer]], dp_group)
            if split and not zero:  # the all-reduce's second half, before the optimizer
                sync = rb.collective(
                    f"dp_grad_allgather_L{layer}",
                    CollectiveType.ALL_GATHER,
                    grad // dp,
                    [sync],
                    dp_group,
                )
            syncs.append(sync)
        opt_flops = 10 * block_params * per_stage / (dp if zero else 1)
        opt = rb.compute(
            "optimizer_step",
            opt_flops / rate,
            [last, *syncs],
            flops=opt_flops,
            tensor_bytes=grad * per_stage,
        )
        if zero and dp > 1:
            shard = grad // dp  # ASTRA-sim: all-gather comm_size is the per-rank shard
            for layer in sorted(last_bwd):
                rb.collective(
                    f"dp_param_allgather_L{layer}",
                    CollectiveType.ALL_GATHER,
                    shard,
                    [opt],
                    dp_group,
                )
        builders.append(rb)
    desc = {
        "tp": tp,
        "pp": pp,
        "dp": dp,
        "layers": layers,
        "hidden": hidden,
        "seq": seq,
        "micro_batches": micro_batches,
        "micro_batch_size": micro_batch_size,
        "zero": zero,
        "dp_sync": dp_sync,
        "peak_flops": peak_flops,
        "efficiency": efficiency,
    }
    return finish("llm", builders, groups, desc)
