"""The NCCL-like model beside the line-rate model on docs/validation.md's published rows.

Run: ``.venv/bin/python bench/nccl_model_vs_published.py`` (seconds; ``--rows`` prints every
row, ``--configs`` the MAPE per configuration). Prints the MAPE per size class (<= 64 KiB,
64 KiB - 64 MiB, >= 64 MiB) of both models, and the NCCL-like model's time-weighted error, over
the healthy configurations and over all (a configuration whose data marks it misconfigured or
limited is kept but left out of the former).

Each configuration of docs/validation/*.toml becomes an ``nccl_model.System`` by one rule for
all, ``genie.calibration.published_systems.system_of`` (nothing is fitted per configuration).
The tables are docs/validation.md's (``genie.calibration.published_doc``).

Each NVIDIA configuration is priced with the tuner constants of the NCCL release its data
states (``nccl_version``; ``genie.collectives.nccl_releases``; ``--configs`` names it), the
others with the latest.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from genie.calibration import published_systems as PS
from genie.calibration.published import load_all
from genie.calibration.published_doc import headline
from genie.calibration.published_systems import CLASSES, ModelRow, price_both
from genie.units import format_bytes

DATA = Path(__file__).resolve().parents[1] / "docs" / "validation"

__all__ = ["CLASSES", "DATA", "load_all", "price"]


def stated_release(cfg: dict[str, Any]) -> str | None:
    """The NCCL release a configuration's data states (``nccl_version``), for NVIDIA GPUs; None
    for AMD ones (RCCL keeps its own constants) or where none is stated."""
    if PS.vendor(cfg) != "nvidia":
        return None
    text = cfg.get("nccl_version")
    return None if text is None else str(text)


def price(configs: list[dict]) -> list[ModelRow]:
    """Every published row priced by both models."""
    return [row for cfg in configs for row in price_both(cfg)]


def main(argv: list[str]) -> int:
    """Print the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DATA), help="a TOML data file or a directory of them")
    ap.add_argument("--rows", action="store_true", help="every row, not only the summary")
    ap.add_argument("--configs", action="store_true", help="MAPE per configuration")
    args = ap.parse_args(argv)
    configs = load_all(args.data)
    rows = price(configs)
    if args.rows:
        print(
            f"{'configuration':44} {'size':>10} {'published':>11} {'line-rate':>18} "
            f"{'NCCL-like':>18} chosen"
        )
        for r in rows:
            print(
                f"{r.config[:44]:44} {format_bytes(r.size):>10} {r.published_s * 1e6:9.1f}us "
                f"{r.line_rate_s * 1e6:9.1f}us {r.line_rate_err:+6.1f}% "
                f"{r.nccl.time_s * 1e6:9.1f}us {r.nccl_err:+6.1f}% {r.nccl.label}"
                + ("" if r.healthy else "  (not healthy)")
                + (f"  ({r.note})" if r.note else "")
            )
        print()
    if args.configs:
        from genie.calibration.accuracy import mape

        print(f"{'configuration':50} {'rows':>4} {'line-rate':>10} {'NCCL-like':>10}")
        for cfg in configs:
            sel = [r for r in rows if r.config == cfg["id"]]
            a = mape([r.line_rate_err for r in sel]) or 0.0
            b = mape([r.nccl_err for r in sel]) or 0.0
            flag = "" if cfg.get("healthy", True) else "  (not healthy)"
            if stated_release(cfg):
                flag += f"  (NCCL {stated_release(cfg)})"
            print(f"{cfg['id'][:50]:50} {len(sel):4d} {a:9.1f}% {b:9.1f}%{flag}")
        print()
    print(
        f"{len(configs)} configurations, {len(rows)} rows; errors are percent of the published time"
    )
    print(
        f"{'rows':44} {'n':>4} {'line-rate MAPE':>15} {'NCCL-like MAPE':>15} {'time-weighted':>14}"
    )
    for scope, n, a, b, w in headline(rows):
        print(f"{scope:44} {n:4d} {a:>15} {b:>15} {w:>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
