"""Explicit collectives under ``shard_map`` (a ring shift, an all-to-all, a reduce-scatter and
an all-gather), for ``genie capture jax`` on a mesh with axes ``dp`` and ``tp``.

Per rank, with a local block of ROWS/dp x COLS/tp float32: ``ppermute`` sends the block to the
next ``tp`` rank (collective-permute: one send and one receive of the block), ``all_to_all``
over ``dp`` exchanges the block (whole block), ``psum_scatter`` over ``tp`` reduces it to
1/tp (whole block), ``all_gather`` over ``dp`` gathers the result (each rank gives 1/tp).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

ROWS = 64
COLS = 256
DTYPE = jnp.float32


def block_bytes(dp: int, tp: int) -> int:
    """Bytes of one rank's input block."""
    return ROWS // dp * COLS // tp * jnp.dtype(DTYPE).itemsize


def mix(x):
    """The four collectives in a chain (each depends on the previous)."""
    mesh = jax.sharding.get_abstract_mesh()
    tp = mesh.shape["tp"]

    def local(b):
        b = jax.lax.ppermute(b, "tp", [(i, (i + 1) % tp) for i in range(tp)])
        b = jax.lax.all_to_all(b, "dp", 0, 0, tiled=True)
        b = jax.lax.psum_scatter(b, "tp", scatter_dimension=0, tiled=True)
        return jax.lax.all_gather(b, "dp", axis=0, tiled=True)

    return jax.shard_map(local, in_specs=P("dp", "tp"), out_specs=P("dp", "tp"), check_vma=False)(x)


def mix_inputs(mesh):
    """A ROWS x COLS array split over dp (rows) and tp (columns)."""
    x = jax.ShapeDtypeStruct((ROWS, COLS), DTYPE)
    return (x,), (P("dp", "tp"),), P("dp", "tp")
