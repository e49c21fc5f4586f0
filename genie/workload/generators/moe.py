"""A mixture-of-experts training step: expert parallelism over all ranks with all-to-all.

Per layer, forward: attention compute, an all-to-all dispatching each token's hidden vector to
``top_k`` experts, expert MLP compute, an all-to-all combining the results; backward mirrors it
with twice the compute; then the dense (non-expert) gradients are all-reduced per layer,
overlapping the rest of the backward pass. all-to-all comm_size is the whole buffer (ASTRA-sim).
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
) -> Workload:
    """One MoE step; each rank hosts ``experts_per_rank`` experts of the ``ranks x`` total."""
    need(ranks >= 2, f"moe needs at least 2 ranks, got {ranks}")
    need(layers >= 1 and hidden >= 1 and seq >= 1 and batch >= 1, "sizes must be >= 1")
    need(1 <= top_k <= ranks * experts_per_rank, "top_k must be in 1..total experts")
    need(0 < efficiency <= 1, f"efficiency must be in (0, 1], got {efficiency}")
    tokens = batch * seq
    h = hidden
    rate = peak_flops * efficiency
    attn_flops = 2 * tokens * 4 * h * h + 4 * tokens * seq * h
    expert_flops = 2 * tokens * top_k * 2 * ffn_mult * h * h
    a2a = tokens * top_k * h * dtype_bytes
    dense_grad = 4 * h * h * dtype_bytes
    builders = []
    for r in range(ranks):
        rb = RankBuilder(r)
        last = None
        for layer in range(layers):
            last = rb.compute(f"fwd_L{layer}_attn", attn_flops / rate, [last], flops=attn_flops)
            last = rb.collective(f"fwd_L{layer}_dispatch", CollectiveType.ALL_TO_ALL, a2a, [last])
            last = rb.compute(
                f"fwd_L{layer}_experts", expert_flops / rate, [last], flops=expert_flops
            )
            last = rb.collective(f"fwd_L{layer}_combine", CollectiveType.ALL_TO_ALL, a2a, [last])
        syncs = []
        for layer in reversed(range(layers)):
            last = rb.collective(f"bwd_L{layer}_combine", CollectiveType.ALL_TO_ALL, a2a, [last])
            last = rb.compute(
                f"bwd_L{layer}_experts", 2 * expert_flops / rate, [last], flops=2 * expert_flops
            )
            last = rb.collective(f"bwd_L{layer}_dispatch", CollectiveType.ALL_TO_ALL, a2a, [last])
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
    return finish("moe", builders, {}, desc)
