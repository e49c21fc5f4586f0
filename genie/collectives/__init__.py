"""Collective algorithms lowered to per-rank step programs, their executors and cost model."""
