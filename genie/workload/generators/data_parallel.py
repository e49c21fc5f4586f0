"""Data-parallel training step: forward and backward per layer, gradient all-reduce buckets
issued as soon as their last gradient is ready (overlapping the rest of the backward pass),
then the optimizer step after every bucket has been reduced.

Buckets are filled as PyTorch DDP fills them: parameter tensors in backward order (per layer
fc2, fc1, attention projection, QKV: 4h^2, 4h^2, h^2, 3h^2 parameters) are added to the current
bucket, which closes as soon as it holds ``bucket_bytes`` or more (so a bucket may pass the cap
by one tensor, and a tensor larger than the cap is a bucket of its own; no tensor is split). A
bucket's all-reduce follows the backward of the layer that holds its last tensor.
"""

from __future__ import annotations

from genie.workload.generators.builder import H100_BF16_FLOPS, RankBuilder, finish, need
from genie.workload.model import CollectiveType, Workload


def ddp_buckets(
    layers: int, hidden: int, dtype_bytes: int, bucket_bytes: int
) -> list[tuple[int, int]]:
    """DDP gradient buckets in backward order: (layer of the bucket's last tensor, bytes)."""
    tensors = [4, 4, 1, 3]  # per layer, backward order: fc2, fc1, proj, qkv (x hidden^2 params)
    out: list[tuple[int, int]] = []
    fill, last = 0, -1
    for layer in reversed(range(layers)):
        for t in tensors:
            fill += t * hidden * hidden * dtype_bytes
            last = layer
            if fill >= bucket_bytes:  # DDP closes a bucket once it reaches the cap
                out.append((last, fill))
                fill = 0
    if fill:
        out.append((last, fill))
    return out


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
    buckets = ddp_buckets(layers, hidden, dtype_bytes, bucket_bytes)
    protos: dict = {}  # nodes the ranks repeat, made once (RankBuilder)
    builders = [RankBuilder(r, protos) for r in range(ranks)]
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
        ready_after: dict[int, list[int]] = {}  # layer -> buckets whose last tensor it holds
        for k, (last_layer, _) in enumerate(buckets):
            ready_after.setdefault(last_layer, []).append(k)
        reduces = []
        for layer in reversed(range(layers)):
            prev = b.compute(
                f"bwd_layer{layer}",
                2 * fwd_flops / rate,
                [prev],
                flops=2 * fwd_flops,
                tensor_bytes=act_bytes,
            )
            for k in ready_after.get(layer, ()):  # the bucket's last gradient is ready
                reduces.append(
                    b.collective(
                        f"allreduce_grad_bucket{k}",
                        CollectiveType.ALL_REDUCE,
                        buckets[k][1],
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
        "bucket_bytes": bucket_bytes,
        "peak_flops": peak_flops,
        "efficiency": efficiency,
    }
    return finish("dp", builders, {}, desc)
