"""docs/validation.md's generated block: the configurations, both models per row, MAPE tables.

For every configuration of the published data files: a paragraph (hardware, source, command,
the line-rate model of it, the lines its figures were read from); then per row the published
time beside the line-rate model's and the NCCL-like model's (with the algorithm and protocol
it chose); then the MAPE of both models per configuration and size class, and the headline over
the healthy configurations (misconfigured or limited ones, as their data says, are kept and
labelled but left out of it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from genie.calibration.accuracy import mape
from genie.calibration.published_systems import CLASSES, ModelRow, price_both
from genie.units import format_bytes

TIME_WEIGHTED_NOTE = "time-weighted: each row weighted by its published time"


def _mape(errs: Sequence[float]) -> str:
    v = mape(errs)
    return "-" if v is None else f"{v:.1f} %"


def _size(spec: dict[str, Any], size: int) -> str:
    return spec.get("size_label") or format_bytes(size)


def configurations_markdown(configs: Sequence[dict[str, Any]]) -> str:
    """One paragraph per configuration: what was measured, where, and genie's model of it."""
    out = []
    for cfg in configs:
        m = cfg["model"]
        k = int(m.get("ranks_per_host", 1))
        intra = f", {m['intra_bandwidth']} between GPUs of a host" if k > 1 else ""
        quotes = "; ".join(f"`{r['quote']}`" for r in cfg["rows"])
        health = "" if cfg.get("healthy", True) else " **Not healthy (outside the headline).**"
        out.append(
            f"**[{cfg['id']}]({cfg['source']})**: {cfg['hardware']}; NICs: {cfg['nics']}; "
            f"switch: {cfg['switch']}; {cfg['ranks']} ranks; {cfg['collective']}; command: "
            f"`{cfg['command']}`; NCCL algorithm: {cfg['nccl_algorithm']}. genie's line-rate "
            f"model: {m.get('topology', 'switch')} of {m['hosts']} hosts x {k} ranks, "
            f"{m['link_rate']} per host, {m['latency']} per link{intra}, "
            f"{m['algorithm']}. {cfg['note']}{health} Read at the source: {quotes}."
        )
    return "\n\n".join(out)


def rows_markdown(configs: Sequence[dict[str, Any]], priced: Sequence[list[ModelRow]]) -> str:
    """Every row: published time, each model's time and error (percent of the published)."""
    lines = [
        "| configuration | size | published | line-rate | error | NCCL-like | chosen | error |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for cfg, rows in zip(configs, priced, strict=True):
        mark = "" if cfg.get("healthy", True) else " (not healthy)"
        for spec, r in zip(cfg["rows"], rows, strict=True):
            lines.append(
                f"| [{cfg['id']}]({cfg['source']}){mark} | {_size(spec, r.size)} "
                f"| {r.published_s * 1e6:.1f} us | {r.line_rate_s * 1e6:.1f} us "
                f"| {r.line_rate_err:+.1f} % | {r.nccl.time_s * 1e6:.1f} us | {r.nccl.label} "
                f"| {r.nccl_err:+.1f} % |"
            )
    return "\n".join(lines)


def _classes(rows: Sequence[ModelRow]) -> list[str]:
    cells = []
    for cls in CLASSES:
        sel = [r for r in rows if r.size_class == cls]
        if sel:
            cells.append(
                f"{_mape([r.line_rate_err for r in sel])} / {_mape([r.nccl_err for r in sel])}"
            )
        else:
            cells.append("-")
    return cells


def per_config_markdown(configs: Sequence[dict[str, Any]], priced: Sequence[list[ModelRow]]) -> str:
    """MAPE per configuration and size class: line-rate / NCCL-like."""
    lines = [
        "| configuration | rows | " + " | ".join(CLASSES) + " | all sizes |",
        "|---|---:|" + "---:|" * (len(CLASSES) + 1),
    ]
    for cfg, rows in zip(configs, priced, strict=True):
        mark = "" if cfg.get("healthy", True) else " (not healthy)"
        every = f"{_mape([r.line_rate_err for r in rows])} / {_mape([r.nccl_err for r in rows])}"
        lines.append(
            f"| {cfg['id']}{mark} | {len(rows)} | " + " | ".join(_classes(rows)) + f" | {every} |"
        )
    return "\n".join(lines)


def headline(rows: Sequence[ModelRow]) -> list[tuple[str, int, str, str, str]]:
    """(scope, rows, line-rate MAPE, NCCL-like MAPE, NCCL-like time-weighted) per size class,
    over all configurations and over the healthy ones."""
    out = []
    for scope, pick in (("healthy", [r for r in rows if r.healthy]), ("all", list(rows))):
        for cls in (*CLASSES, "all sizes"):
            sel = [r for r in pick if cls in ("all sizes", r.size_class)]
            total = sum(r.published_s for r in sel)
            weighted = (
                f"{sum(abs(r.nccl_err) * r.published_s for r in sel) / total:.1f} %"
                if total > 0
                else "-"
            )
            out.append(
                (
                    f"{scope} configurations, {cls}",
                    len(sel),
                    _mape([r.line_rate_err for r in sel]),
                    _mape([r.nccl_err for r in sel]),
                    weighted,
                )
            )
    return out


def headline_markdown(rows: Sequence[ModelRow]) -> str:
    """The headline table (markdown)."""
    lines = [
        "| rows | n | line-rate MAPE | NCCL-like MAPE | NCCL-like, time-weighted |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [f"| {s} | {n} | {a} | {b} | {w} |" for s, n, a, b, w in headline(rows)]
    return "\n".join(lines)


def document_block(configs: Sequence[dict[str, Any]]) -> str:
    """What docs/validation.md carries between its markers."""
    priced = [price_both(cfg) for cfg in configs]
    every = [r for rows in priced for r in rows]
    n_healthy = sum(1 for c in configs if c.get("healthy", True))
    return (
        f"### Summary\n\n{len(configs)} configurations ({n_healthy} healthy), {len(every)} rows. "
        f"MAPE of each model per size class ({TIME_WEIGHTED_NOTE}):\n\n"
        + headline_markdown(every)
        + "\n\n### Per configuration (MAPE, line-rate / NCCL-like)\n\n"
        + per_config_markdown(configs, priced)
        + "\n\n### Configurations\n\n"
        + configurations_markdown(configs)
        + "\n\n### Published vs genie, row by row\n\n"
        + rows_markdown(configs, priced)
    )
