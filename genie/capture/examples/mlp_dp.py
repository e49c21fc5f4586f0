"""An MLP training step, data parallel (``train_step``) or with sharded parameters
(``fsdp_step``, ZeRO-3 style), for ``genie capture jax``.

``train_step``: the batch is split over mesh axis ``dp``, parameters are replicated, so the
sharding implies one gradient all-reduce over each ``dp`` group, of the parameters' bytes in
total (XLA may combine tensors into fewer all-reduces). ``fsdp_step``: weights are split over
``dp`` along their first dimension: all-gathers of the weight shards, reduce-scatters of the
gradients.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

#: Layer widths: input, hidden..., output.
WIDTHS = (512, 2048, 2048, 512)
#: Global batch (divisible by 8 so up to 8 data-parallel ranks split it evenly).
BATCH = 64
LEARNING_RATE = 1e-3
DTYPE = jnp.float32


def param_shapes() -> list[tuple[tuple[int, int], tuple[int]]]:
    """(weight shape, bias shape) of each layer."""
    return [((a, b), (b,)) for a, b in itertools.pairwise(WIDTHS)]


def param_bytes() -> int:
    """Bytes of all parameters."""
    size = jnp.dtype(DTYPE).itemsize
    return sum((w[0] * w[1] + b[0]) * size for w, b in param_shapes())


def _mlp(params, x):
    for i, (w, b) in enumerate(params):
        x = x @ w + b
        if i < len(params) - 1:
            x = jax.nn.relu(x)
    return x


def _loss(params, x, y):
    return jnp.mean((_mlp(params, x) - y) ** 2)


def train_step(params, x, y):
    """One SGD step on a mean-squared-error loss; returns the new parameters."""
    grads = jax.grad(_loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)


def _abstract_inputs():
    params = [
        (jax.ShapeDtypeStruct(w, DTYPE), jax.ShapeDtypeStruct(b, DTYPE)) for w, b in param_shapes()
    ]
    x = jax.ShapeDtypeStruct((BATCH, WIDTHS[0]), DTYPE)
    y = jax.ShapeDtypeStruct((BATCH, WIDTHS[-1]), DTYPE)
    return params, x, y


def train_step_inputs(mesh):
    """Data parallel: batch over ``dp``, parameters replicated."""
    params, x, y = _abstract_inputs()
    pspec = [(P(), P()) for _ in params]
    return (params, x, y), (pspec, P("dp", None), P("dp", None)), pspec


def fsdp_step(params, x, y):
    """The same step with parameters sharded over ``dp`` (the compiler gathers them)."""
    return train_step(params, x, y)


def fsdp_step_inputs(mesh):
    """Parameters split over ``dp`` along their first dimension, batch over ``dp``."""
    params, x, y = _abstract_inputs()
    pspec = [(P("dp", None), P("dp")) for _ in params]
    return (params, x, y), (pspec, P("dp", None), P("dp", None)), pspec
