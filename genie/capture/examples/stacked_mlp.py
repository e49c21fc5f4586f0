"""Data-parallel training of LAYERS identical layers run by ``jax.lax.scan`` (the compiled HLO
keeps a ``while`` loop; capture unrolls it by XLA's known trip count), for ``genie capture
jax``. The sharding implies one all-reduce of HIDDEN x HIDDEN weights per layer over ``dp``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

LAYERS = 6
HIDDEN = 256
BATCH = 32
DTYPE = jnp.float32


def train_step(ws, x):
    """One SGD step; ``ws`` stacks the layers' weights (LAYERS x HIDDEN x HIDDEN)."""

    def layer(h, w):
        return jnp.tanh(h @ w), None

    def loss(w_all):
        h, _ = jax.lax.scan(layer, x, w_all)
        return jnp.mean(h**2)

    return ws - 1e-3 * jax.grad(loss)(ws)


def train_step_inputs(mesh):
    """Weights replicated, batch over ``dp``."""
    args = (
        jax.ShapeDtypeStruct((LAYERS, HIDDEN, HIDDEN), DTYPE),
        jax.ShapeDtypeStruct((BATCH, HIDDEN), DTYPE),
    )
    return args, (P(), P("dp", None)), P()
