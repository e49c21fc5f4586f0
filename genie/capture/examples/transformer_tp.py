"""A transformer block (attention + MLP) with Megatron-style tensor parallelism, for
``genie capture jax``.

Heads and the MLP's hidden dimension are split over mesh axis ``tp`` (QKV and the first MLP
matrix column-parallel, the output projection and the second MLP matrix row-parallel); the
batch is split over ``dp`` when the mesh has it. The sharding implies, per forward pass, two
all-reduces over each ``tp`` group, each of one rank's activations: (BATCH/dp) x SEQ x HIDDEN.

``train_step`` adds the backward pass and an SGD update: one more such all-reduce (the input
gradient of the MLP's column-parallel matrix; the block input's gradient is not needed), and
with ``dp`` > 1 the weight gradients all-reduced over each ``dp`` group: weight_bytes()/tp.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

BATCH = 8
SEQ = 128
HIDDEN = 512
HEADS = 8
FFN = 2048
DTYPE = jnp.float32


def activation_bytes(dp: int = 1) -> int:
    """Bytes of one rank's block input (BATCH/dp x SEQ x HIDDEN)."""
    return BATCH // dp * SEQ * HIDDEN * jnp.dtype(DTYPE).itemsize


def _norm(x):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5)


def block(params, x):
    """Pre-norm block: x + attn(norm(x)), then + mlp(norm(.))."""
    wqkv, wo, w1, w2 = params
    h = _norm(x)
    q, k, v = jnp.einsum("bsh,htnd->tbsnd", h, wqkv)
    scores = jnp.einsum("bqnd,bknd->bnqk", q, k) / jnp.sqrt(q.shape[-1]).astype(x.dtype)
    att = jnp.einsum("bnqk,bknd->bqnd", jax.nn.softmax(scores, axis=-1), v)
    x = x + jnp.einsum("bqnd,ndh->bqh", att, wo)
    h = _norm(x)
    return x + jax.nn.gelu(h @ w1) @ w2


def block_inputs(mesh):
    """Weights split over ``tp`` (heads, FFN columns/rows); batch over ``dp`` if present."""
    dp = "dp" if "dp" in mesh.axis_names else None
    hd = HIDDEN // HEADS
    params = (
        jax.ShapeDtypeStruct((HIDDEN, 3, HEADS, hd), DTYPE),
        jax.ShapeDtypeStruct((HEADS, hd, HIDDEN), DTYPE),
        jax.ShapeDtypeStruct((HIDDEN, FFN), DTYPE),
        jax.ShapeDtypeStruct((FFN, HIDDEN), DTYPE),
    )
    x = jax.ShapeDtypeStruct((BATCH, SEQ, HIDDEN), DTYPE)
    pspec = (P(None, None, "tp", None), P("tp", None, None), P(None, "tp"), P("tp", None))
    return (params, x), (pspec, P(dp, None, None)), P(dp, None, None)


def train_step(params, x):
    """Gradients of a squared-output loss through the block, weights updated by SGD."""

    def loss(p, xx):
        return jnp.mean(block(p, xx) ** 2)

    grads = jax.grad(loss)(params, x)
    return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)


def train_step_inputs(mesh):
    """As ``block_inputs``; the updated weights keep their tensor-parallel sharding."""
    args, in_specs, _ = block_inputs(mesh)
    return args, in_specs, in_specs[0]


def weight_bytes() -> int:
    """Bytes of all the block's weights."""
    hd = HIDDEN // HEADS
    n = HIDDEN * 3 * HEADS * hd + HEADS * hd * HIDDEN + 2 * HIDDEN * FFN
    return n * jnp.dtype(DTYPE).itemsize
