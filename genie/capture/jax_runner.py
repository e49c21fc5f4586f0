"""Lower and compile a user's JAX function for N host (CPU) devices; print the HLO as JSON.

Run as ``python -m genie.capture.jax_runner '<json request>'``: the device count is fixed when
jax is first imported, so each capture runs in a fresh process that sets
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before importing jax.

Entry-point convention (``MODULE:FUNCTION``, MODULE a dotted module or a ``.py`` path):

* ``FUNCTION`` is the function to jit (plain positional arguments, pytrees allowed);
* the module defines ``FUNCTION_inputs(mesh)`` returning ``(args, in_specs)`` or
  ``(args, in_specs, out_specs)``: ``args`` a tuple of arrays or ``jax.ShapeDtypeStruct``
  (nothing is allocated for these), the specs ``PartitionSpec`` pytrees matching ``args`` (or
  NamedShardings). ``out_specs`` None lets XLA choose.

FUNCTION is traced and lowered under ``jax.set_mesh(mesh)``, so ``jax.shard_map`` without a
``mesh=`` argument and ``jax.sharding.get_abstract_mesh()`` see the capture's mesh.

The mesh is ``jax.sharding.Mesh`` over devices 0..N-1 in order, shaped by ``--mesh`` (axis
names in order, row-major), so rank r of the captured ETs is device r.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path


def _set_flags(devices: int) -> None:
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
    flags.append(f"--xla_force_host_platform_device_count={devices}")
    os.environ["XLA_FLAGS"] = " ".join(flags)
    os.environ["JAX_PLATFORMS"] = "cpu"


def _load_module(spec: str):
    if spec.endswith(".py") or "/" in spec:
        path = Path(spec)
        if not path.is_file():
            raise SystemExit(f"capture: no such file {spec}")
        sys.path.insert(0, str(path.parent.resolve()))
        mspec = importlib.util.spec_from_file_location(path.stem, path)
        if mspec is None or mspec.loader is None:
            raise SystemExit(f"capture: cannot load {spec} as a module")
        mod = importlib.util.module_from_spec(mspec)
        mspec.loader.exec_module(mod)
        return mod
    sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(spec)
    except ImportError as exc:
        raise SystemExit(f"capture: cannot import module {spec!r}: {exc}") from None


def _cost(compiled) -> dict:
    try:
        ca = compiled.cost_analysis()
    except Exception as exc:  # backends may not implement it
        return {"error": str(exc)}
    if isinstance(ca, list):
        ca = ca[0] if ca else {}
    return {k: float(v) for k, v in (ca or {}).items() if k in ("flops", "bytes accessed")}


def _mesh_context(jax, mesh):
    """``jax.set_mesh(mesh)`` (or the older spellings) as a context manager."""
    for make in (
        getattr(jax, "set_mesh", None),
        getattr(jax.sharding, "use_mesh", None),
    ):
        if make is not None:
            return make(mesh)
    return mesh


def lower(job: dict, n: int) -> dict:
    """Compile one job's function for ``n`` devices; returns the HLO text and cost analysis."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = jax.devices()
    if len(devices) < n:
        raise SystemExit(f"capture: jax has {len(devices)} devices, {n} requested")
    axes = job["mesh"]
    mesh = Mesh(np.array(devices[:n]).reshape([s for _, s in axes]), tuple(a for a, _ in axes))
    modname, _, fname = job["target"].rpartition(":")
    mod = _load_module(modname)
    fn = getattr(mod, fname, None)
    inputs = getattr(mod, f"{fname}_inputs", None)
    if not callable(fn) or not callable(inputs):
        raise SystemExit(
            f"capture: {modname} must define {fname}(...) and {fname}_inputs(mesh) "
            "(see genie.capture.jax_runner)"
        )
    spec = inputs(mesh)
    if not isinstance(spec, tuple) or len(spec) not in (2, 3):
        raise SystemExit(f"capture: {fname}_inputs(mesh) must return (args, in_specs[, out_specs])")
    args, in_specs = spec[0], spec[1]
    out_specs = spec[2] if len(spec) == 3 else None

    def shard(tree):
        return jax.tree.map(
            lambda s: NamedSharding(mesh, s) if isinstance(s, PartitionSpec) else s,
            tree,
            is_leaf=lambda s: isinstance(s, PartitionSpec) or s is None,
        )

    kw = {"in_shardings": shard(tuple(in_specs))}
    if out_specs is not None:
        kw["out_shardings"] = shard(out_specs)
    with _mesh_context(jax, mesh):
        compiled = jax.jit(fn, **kw).lower(*args).compile()
    return {
        "hlo": compiled.as_text(),
        "cost_analysis": _cost(compiled),
        "jax_version": jax.__version__,
        "device_ids": [d.id for d in mesh.devices.flat],
    }


def main() -> None:
    """Read the JSON request from argv[1] and write the JSON answers to the file it names.

    Request: ``{"devices": N, "jobs": [{"target": "m:f", "mesh": [["dp", N]]}, ...],
    "answer": path}``; the answer file holds one object per job, in order.
    """
    request = json.loads(sys.argv[1])
    _set_flags(request["devices"])
    answers = [lower(job, request["devices"]) for job in request["jobs"]]
    Path(request["answer"]).write_text(json.dumps(answers))


if __name__ == "__main__":
    main()
