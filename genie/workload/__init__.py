"""Chakra execution-trace workloads: the ET codec, the per-rank graph model, generators."""
