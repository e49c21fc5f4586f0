"""Sweeps: one simulate command over a grid of options, run on all cores or on a Dask cluster.

``grid`` plans purely (the grid's points, each point's command line, labels); ``pool`` runs a
function over the points in a local process pool or on an existing Dask distributed cluster,
reporting each result as it arrives.
"""
