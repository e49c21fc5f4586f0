"""A mixture-of-experts training step: expert parallelism over all ranks with all-to-all.

Per layer, forward: attention compute, an all-to-all dispatching each token's hidden vector to
``top_k`` experts, expert MLP compute, an all-to-all combining the results; backward mirrors it
with twice the compute; then the dense (non-expert) gradients are all-reduced per layer,
overlapping the rest of the backward pass. all-to-all comm_size is the whole buffer (ASTRA-sim).

Expert-load skew (``expert_skew`` s > 0): expert e (of E = ranks x experts_per_rank; expert e on
rank e // experts_per_rank) draws a share of the tokens proportional to 1 / (e + 1)^s (Zipf; 0
is even), the same on every rank, so the rank hosting the popular experts receives more: each
dispatch all-to-all sends rank j that share of the buffer (per-peer sizes in the attribute
``comm_split_sizes``, ``genie.sim.uneven``), each combine sends it back (the transpose), and each
rank's expert compute scales with the tokens it holds. Even (s = 0) writes plain all-to-alls.
"""

from __future__ import annotations

from genie.workload.generators.builder import H100_BF16_FLOPS, RankBuilder, finish, need
from genie.workload.model import CollectiveType, Workload


def moe(
    ranks: int,
    layers: int = 4,
    hidden: int = 2048,
    seq: int = 2048,
    batch: int = 4,
    experts_per_rank: int = 2,
    top_k: int = 2,
    ffn_mult: int = 4,
    dtype_bytes: int = 2,
    peak_flops: float = H100_BF16_FLOPS,
    efficiency: float = 0.5,
    expert_skew: float = 0.0,
) -> Workload:
    """One MoE step; each rank hosts ``experts_per_rank`` experts of the ``ranks x`` total."""
    need(ranks >= 2, f"moe needs at least 2 ranks, got {ranks}")
    need(layers >= 1 and hidden >= 1 and seq >= 1 and batch >= 1, "sizes must be >= 1")
    need(1 <= top_k <= ranks * experts_per_rank, "top_k must be in 1..total experts")
    need(0 < efficiency <= 1, f"efficiency must be in (0, 1], got {efficiency}")
    need(0 <= expert_skew <= 10, f"expert skew must be in [0, 10], got {expert_skew}")
    tokens = batch * seq
    h = hidden
    rate = peak_flops * efficiency
    attn_flops = 2 * tokens * 4 * h * h + 4 * tokens * seq * h
    expert_flops = 2 * tokens * top_k * 2 * ffn_mult * h * h
    a2a = tokens * top_k * h * dtype_bytes
    dense_grad = 4 * h * h * dtype_bytes
    blocks = expert_blocks(ranks, experts_per_rank, expert_skew, a2a, dtype_bytes)
    builders = []
    protos: dict = {}  # nodes the ranks repeat, made once (RankBuilder)
    for r in range(ranks):
        rb = RankBuilder(r, protos)
        # dispatch: my tokens to each expert's rank; combine: what my experts did, sent back
        out_row = blocks
        back_row = None if blocks is None else [blocks[r]] * ranks
        load = 1.0 if blocks is None else ranks * blocks[r] / max(1, sum(blocks))
        e_flops = expert_flops * load  # my experts' tokens against the mean
        last = None
        for layer in range(layers):
            last = rb.compute(f"fwd_L{layer}_attn", attn_flops / rate, [last], flops=attn_flops)
            last = _a2a(rb, f"fwd_L{layer}_dispatch", last, a2a, out_row)
            last = rb.compute(f"fwd_L{layer}_experts", e_flops / rate, [last], flops=e_flops)
            last = _a2a(rb, f"fwd_L{layer}_combine", last, a2a, back_row)
        syncs = []
        for layer in reversed(range(layers)):
            # gradients flow the dispatch way first, then back
            last = _a2a(rb, f"bwd_L{layer}_combine", last, a2a, out_row)
            last = rb.compute(
                f"bwd_L{layer}_experts", 2 * e_flops / rate, [last], flops=2 * e_flops
            )
            last = _a2a(rb, f"bwd_L{layer}_dispatch", last, a2a, back_row)
            last = rb.compute(
                f"bwd_L{layer}_attn", 2 * attn_flops / rate, [last], flops=2 * attn_flops
            )
            syncs.append(
                rb.collective(
                    f"dp_dense_grad_L{layer}", CollectiveType.ALL_REDUCE, dense_grad, [last]
                )
            )
        rb.compute("optimizer_step", 1e-4, [last, *syncs])
        builders.append(rb)
    desc = {
        "layers": layers,
        "hidden": hidden,
        "seq": seq,
        "batch": batch,
        "experts": ranks * experts_per_rank,
        "top_k": top_k,
        "peak_flops": peak_flops,
        "efficiency": efficiency,
    }
    if expert_skew:
        desc["expert_skew"] = expert_skew
    return finish("moe", builders, {}, desc)


def _a2a(rb: RankBuilder, name: str, last, size: int, row: list[int] | None) -> int:
    """An all-to-all of ``size`` bytes, or uneven with ``row`` bytes to each rank."""
    if row is None:
        return rb.collective(name, CollectiveType.ALL_TO_ALL, size, [last])
    return rb.collective(name, CollectiveType.ALL_TO_ALL, sum(row), [last], splits=row)


def expert_blocks(
    ranks: int, experts_per_rank: int, skew: float, total: int, elem: int
) -> list[int] | None:
    """Bytes of a dispatch all-to-all each rank sends to each rank (None when even)."""
    if skew <= 0:
        return None
    n_exp = ranks * experts_per_rank
    weight = [(e + 1) ** -skew for e in range(n_exp)]
    per_rank = [
        sum(weight[j * experts_per_rank : (j + 1) * experts_per_rank]) for j in range(ranks)
    ]
    norm = sum(per_rank)
    return [int(total * w / norm) // elem * elem for w in per_rank]
