"""Sweeps: one simulation over a grid, run on all cores or on a Dask cluster.

``grid`` parses the command line's grid purely (``--grid KEY=V1,V2``, ``--set KEY=VALUE``: the
keys, every point, each point's simulate command line, labels); ``pool`` runs a function over
items in a local process pool or on an existing Dask distributed cluster, reporting each result
as it arrives. The sweep itself, over the fields of a ``SimulateSpec``, is ``genie.api.sweep``.
"""
