"""The NCCL-like model beside the line-rate model on docs/validation.md's published rows.

Run: ``.venv/bin/python bench/nccl_model_vs_published.py`` (a second; ``--rows`` prints every
row, ``--markdown`` the tables as docs/nccl-model.md carries them). Prints the MAPE per size
class (<= 64 KiB, 64 KiB - 64 MiB, >= 64 MiB) of both models, over all configurations and over
the healthy ones (a configuration whose note calls it misconfigured, or that says the nominal
model misses a limit of the system, is left out of the latter).

Each configuration of docs/validation/published.toml becomes an ``nccl_model.System`` from what
the data file states, by one rule for all (nothing is fitted per configuration): nodes and GPUs
per node from its model table; the node's network rate is its ``link_rate`` less InfiniBand's
(or, where the source says RoCE, RoCEv2's) packet headers; the intra-node bus is its
``intra_bandwidth`` scaled to NCCL's per-link figure for the GPU generation (topo.h); a GPU's
PCIe link to its NICs is Gen4 x16 (Ampere) or Gen5 x16 (later); the GPU generation comes from
the GPU named in ``hardware`` and the CPU vendor from it too (Intel where not stated);
NCCL_ALGO / NCCL_PROTO in the command are honoured where they name ring or tree. The line-rate
figures are genie.calibration.published's (docs/validation.md's table).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genie.calibration.accuracy import error_pct, mape
from genie.calibration.published import load, price_config
from genie.collectives import gpu_presets as P
from genie.collectives import nccl_model as N
from genie.units import format_bytes, parse_bandwidth
from genie.vocabulary import bus_factor

DATA = Path(__file__).resolve().parents[1] / "docs" / "validation" / "published.toml"
CLASSES = ("<= 64 KiB", "64 KiB - 64 MiB", ">= 64 MiB")
#: GPU name in the hardware text -> NCCL's generation (AMD priced as Hopper, an assumption)
GENERATIONS = (
    ("B200", "blackwell"),
    ("GB200", "blackwell"),
    ("GB10", "blackwell"),
    ("H100", "hopper"),
    ("H200", "hopper"),
    ("H20", "hopper"),
    ("MI300", "hopper"),
    ("MI355", "hopper"),
    ("A100", "ampere"),
    ("V100", "volta"),
)
#: NCCL's NVLink bandwidth per link (topo.h) over the link's line rate, per generation
NVLINK_FRACTION = {"volta": 20.0 / 25.0, "ampere": 20.0 / 25.0, "hopper": 20.6 / 25.0}
NVLINK_FRACTION["blackwell"] = 40.1 / 50.0


@dataclass
class Row:
    """One published row with both models' times."""

    config: str
    size: int
    published_s: float
    line_rate_s: float
    nccl: N.Prediction
    healthy: bool
    note: str

    @property
    def size_class(self) -> str:
        """Which of CLASSES the size falls in."""
        if self.size <= 64 << 10:
            return CLASSES[0]
        return CLASSES[2] if self.size >= 64 << 20 else CLASSES[1]

    @property
    def line_rate_err(self) -> float:
        """Line-rate model's error, percent of the published time."""
        return float(error_pct(self.line_rate_s, self.published_s) or 0.0)

    @property
    def nccl_err(self) -> float:
        """NCCL-like model's error, percent of the published time."""
        return float(error_pct(self.nccl.time_s, self.published_s) or 0.0)


def generation(text: str) -> str:
    """The NCCL generation of the first GPU named in ``text`` (hopper where none is known)."""
    for name, gen in GENERATIONS:
        if re.search(rf"\b{name}", text):
            return gen
    return "hopper"


def healthy(cfg: dict[str, Any]) -> bool:
    """False for configurations the data file marks as misconfigured or limited."""
    if "healthy" in cfg:
        return bool(cfg["healthy"])
    note = str(cfg.get("note", "")).lower()
    return not ("misconfigured" in note or "misses whatever limits" in note)


def system_of(cfg: dict[str, Any]) -> tuple[N.System, str | None, str | None, str]:
    """(system, NCCL_ALGO, NCCL_PROTO, note) of one configuration, by the module's rule."""
    m = cfg["model"]
    hw = str(cfg.get("hardware", ""))
    gen = generation(f"{cfg['id']} {hw}")
    text = f"{cfg.get('nics', '')} {cfg.get('switch', '')} {cfg.get('command', '')}"
    kind: P.NicKind = "roce" if re.search(r"roce", text, re.I) else "ib"
    link = parse_bandwidth(m["link_rate"])
    intra_line = parse_bandwidth(m.get("intra_bandwidth", m["link_rate"]))
    cpu: P.Cpu = "amd" if re.search(r"\bEPYC\b|\bAMD\b", hw) else "intel"
    system = N.System(
        nodes=int(m["hosts"]),
        gpus_per_node=int(m.get("ranks_per_host", 1)),
        intra_bw=intra_line * NVLINK_FRACTION[gen],
        net_bw=link * P.net_payload_fraction(kind),
        gpu_net_bw=P.PCIE4_X16 if gen in ("volta", "ampere") else P.PCIE5_X16,
        tuning=gen,  # type: ignore[arg-type]
        cpu=cpu,
    )
    cmd = str(cfg.get("command", ""))
    algo = re.search(r"NCCL_ALGO=(\w+)", cmd)
    proto = re.search(r"NCCL_PROTO=(\w+)", cmd)
    note = ""
    forced_algo = None
    if algo:
        if algo.group(1).lower() in N.ALGORITHMS:
            forced_algo = algo.group(1).lower()
        else:
            note = f"NCCL_ALGO={algo.group(1)} is not modelled: NCCL's choice priced"
    return system, forced_algo, proto.group(1) if proto else None, note


def price(configs: list[dict[str, Any]]) -> list[Row]:
    """Every published row priced by both models."""
    out: list[Row] = []
    for cfg in configs:
        system, algo, proto, note = system_of(cfg)
        coll = cfg.get("collective", "all_reduce")
        factor = bus_factor(coll, system.n_ranks)
        for spec, line in zip(cfg["rows"], price_config(cfg), strict=True):
            size = int(spec["size"])
            if "time_us" in spec:
                pub = float(spec["time_us"]) * 1e-6
            else:
                pub = size * factor / (float(spec["busbw_GBps"]) * 1e9)
            pred = N.choose(coll, size, system, algo, proto)
            out.append(Row(cfg["id"], size, pub, line.genie_s, pred, healthy(cfg), note))
    return out


def _m(errs: list[float]) -> str:
    v = mape(errs)
    return "-" if v is None else f"{v:.1f} %"


def summary(rows: list[Row]) -> list[tuple[str, int, str, str]]:
    """(scope, rows, line-rate MAPE, NCCL-like MAPE) per size class and overall."""
    out = []
    for scope, pick in (
        ("all configurations", rows),
        ("healthy only", [r for r in rows if r.healthy]),
    ):
        for cls in (*CLASSES, "all sizes"):
            sel = [r for r in pick if cls in ("all sizes", r.size_class)]
            out.append(
                (
                    f"{scope}, {cls}",
                    len(sel),
                    _m([r.line_rate_err for r in sel]),
                    _m([r.nccl_err for r in sel]),
                )
            )
    return out


def markdown(rows: list[Row]) -> str:
    """The two tables of docs/nccl-model.md (rows, then MAPE per size class)."""
    lines = [
        "| configuration | size | published | line-rate | error | NCCL-like | chosen | error |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.config}{'' if r.healthy else ' (limited)'} | {format_bytes(r.size)} "
            f"| {r.published_s * 1e6:.1f} us | {r.line_rate_s * 1e6:.1f} us "
            f"| {r.line_rate_err:+.1f} % | {r.nccl.time_s * 1e6:.1f} us | {r.nccl.label} "
            f"| {r.nccl_err:+.1f} % |"
        )
    lines += ["", "| rows | n | line-rate MAPE | NCCL-like MAPE |", "|---|---:|---:|---:|"]
    lines += [f"| {s} | {n} | {a} | {b} |" for s, n, a, b in summary(rows)]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Print the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DATA), help="published results (TOML)")
    ap.add_argument("--rows", action="store_true", help="every row, not only the summary")
    ap.add_argument("--markdown", action="store_true", help="markdown tables")
    args = ap.parse_args(argv)
    rows = price(load(args.data))
    if args.markdown:
        print(markdown(rows))
        return 0
    if args.rows:
        print(
            f"{'configuration':24} {'size':>10} {'published':>11} {'line-rate':>18} "
            f"{'NCCL-like':>18} chosen"
        )
        for r in rows:
            print(
                f"{r.config:24} {format_bytes(r.size):>10} {r.published_s * 1e6:9.1f}us "
                f"{r.line_rate_s * 1e6:9.1f}us {r.line_rate_err:+6.1f}% "
                f"{r.nccl.time_s * 1e6:9.1f}us {r.nccl_err:+6.1f}% {r.nccl.label}"
                + (f"  ({r.note})" if r.note else "")
            )
        print()
    print(f"{'rows':44} {'n':>4} {'line-rate MAPE':>15} {'NCCL-like MAPE':>15}")
    for scope, n, a, b in summary(rows):
        print(f"{scope:44} {n:4d} {a:>15} {b:>15}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
