"""Data-parallel training step: forward and backward per layer, gradient all-reduce buckets
issued as soon as their layers' backward is done (overlapping the rest of the backward pass),
then the optimizer step after every bucket has been reduced.
"""

from __future__ import annotations

from genie.workload.generators.builder import H100_BF16_FLOPS, RankBuilder, finish, need
from genie.workload.model import CollectiveType, Workload


def data_parallel(
    ranks: int,
    layers: int = 12,
    hidden: int = 2048,
    seq: int = 1024,
    batch: int = 8,
    dtype_bytes: int = 2,
    bucket_bytes: int = 25 * 2**20,
    peak_flops: float = H100_BF16_FLOPS,
    efficiency: float = 0.5,
) -> Workload:
    """One DP training step; each layer has ``12 hidden^2`` parameters (a transformer block)."""
    need(ranks >= 2, f"dp needs at least 2 ranks, got {ranks}")
    need(layers >= 1 and hidden >= 1 and seq >= 1 and batch >= 1, "sizes must be >= 1")
    need(0 < efficiency <= 1, f"efficiency must be in (0, 1], got {efficiency}")
    need(bucket_bytes >= 1, "bucket size must be >= 1 byte")
    params = 12 * hidden * hidden
    grad_bytes = params * dtype_bytes
    tokens = batch * seq
    fwd_flops = 2 * tokens * params
    rate = peak_flops * efficiency
    act_bytes = tokens * hidden * dtype_bytes
    # buckets in backward order (last layer first), like PyTorch DDP
    buckets: list[list[int]] = [[]]
    fill = 0
    for layer in reversed(range(layers)):
        if buckets[-1] and fill + grad_bytes > bucket_bytes:
            buckets.append([])
            fill = 0
        buckets[-1].append(layer)
        fill += grad_bytes
    builders = [RankBuilder(r) for r in range(ranks)]
    for b in builders:
        prev = None
        for layer in range(layers):
            prev = b.compute(
                f"fwd_layer{layer}",
                fwd_flops / rate,
                [prev],
                flops=fwd_flops,
                tensor_bytes=act_bytes,
            )
        bucket_end = {bucket[-1]: k for k, bucket in enumerate(buckets)}
        reduces = []
        for layer in reversed(range(layers)):
            prev = b.compute(
                f"bwd_layer{layer}",
                2 * fwd_flops / rate,
                [prev],
                flops=2 * fwd_flops,
                tensor_bytes=act_bytes,
            )
            k = bucket_end.get(layer)
            if k is not None:  # the bucket's last gradient is ready: reduce it now
                reduces.append(
                    b.collective(
                        f"allreduce_grad_bucket{k}",
                        CollectiveType.ALL_REDUCE,
                        grad_bytes * len(buckets[k]),
                        [prev],
                    )
                )
        opt_flops = 10 * params * layers
        b.compute(
            "optimizer_step", opt_flops / rate, reduces, flops=opt_flops, tensor_bytes=grad_bytes
        )
    desc = {
        "layers": layers,
        "hidden": hidden,
        "seq": seq,
        "batch": batch,
        "buckets": len(buckets),
        "peak_flops": peak_flops,
        "efficiency": efficiency,
    }
    return finish("dp", builders, {}, desc)
