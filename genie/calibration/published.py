"""genie's cost model against published nccl-tests results on real GPU clusters.

The data file (``docs/validation/published.toml``) lists configurations: where the figures were
published (a link), the hardware, NICs, switch, rank count and nccl-tests command as reported,
genie's model of that hardware (hosts, ranks per host, each host's network rate, latency per
link, the intra-host rate, the algorithm), and rows of published figures per size: the time
and/or busbw as printed, each with the line it was read from. ``price_config`` prices every row
with the nominal cost model (no calibration: nobody measured these clusters for genie) and
``genie.calibration.published_doc`` renders the table docs/validation.md carries, beside the
NCCL-like model's (``genie.calibration.published_systems``); the test recomputes it.

Error = (genie's time - published time) / published time, as everywhere in genie; where a row
gives only busbw, the published time is size x bus factor / busbw (nccl-tests' definition).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genie.calibration.accuracy import error_pct
from genie.errors import CalibrationError
from genie.units import parse_bandwidth, parse_duration
from genie.vocabulary import bus_factor

TABLE_BEGIN = "<!-- table: made by docs/validation/make_table.py; do not edit by hand -->"
TABLE_END = "<!-- end of table -->"


@dataclass
class Row:
    """One published figure beside genie's."""

    config: str
    size: int
    published_s: float
    published_busbw: float  # bytes/s
    genie_s: float
    genie_busbw: float

    @property
    def error_pct(self) -> float:
        """(genie - published) / published, percent (of time)."""
        e = error_pct(self.genie_s, self.published_s)
        if e is None:
            raise CalibrationError(f"{self.config}: published time {self.published_s} s is not > 0")
        return e


def load(path: str | Path) -> list[dict[str, Any]]:
    """The configurations of a data file."""
    try:
        doc = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CalibrationError(f"cannot read published results {path}: {exc}") from None
    configs = doc.get("config") or []
    if not configs:
        raise CalibrationError(f"{path}: no [[config]] in it")
    return configs


def load_all(path: str | Path) -> list[dict[str, Any]]:
    """The configurations of a data file, or of every ``*.toml`` under a directory (sorted by
    path, ``published.toml`` first); ids must be unique."""
    p = Path(path)
    if not p.is_dir():
        return load(p)
    files = sorted(p.rglob("*.toml"), key=lambda f: (f.name != "published.toml", str(f)))
    if not files:
        raise CalibrationError(f"{path}: no *.toml data files in it")
    configs = [cfg for f in files for cfg in load(f)]
    seen: set[str] = set()
    for cfg in configs:
        cid = str(cfg.get("id", ""))
        if not cid or cid in seen:
            raise CalibrationError(f"{path}: configuration id {cid!r} missing or twice")
        seen.add(cid)
    return configs


def model_topology(m: dict[str, Any]) -> Any:
    """genie's nominal topology of a configuration's ``model`` table (a switch star)."""
    from genie.collectives import topology as T

    kind = m.get("topology", "switch")
    factory = {"switch": T.switch, "fully_connected": T.fully_connected}.get(kind)
    if factory is None:
        raise CalibrationError(f"model topology {kind!r}: switch or fully_connected")
    return factory(
        int(m["hosts"]),
        parse_bandwidth(m["link_rate"]),
        parse_duration(m["latency"]),
        intra_bandwidth=parse_bandwidth(m.get("intra_bandwidth", m["link_rate"])),
        intra_latency=parse_duration(m.get("intra_latency", "0")),
    )


def price_config(cfg: dict[str, Any]) -> list[Row]:
    """Every published row of ``cfg`` with genie's time and busbw for it."""
    from genie.collectives import build_program
    from genie.collectives.cost import estimate

    m = cfg["model"]
    topo = model_topology(m)
    k = int(m.get("ranks_per_host", 1))
    n = int(cfg["ranks"])
    if n != int(m["hosts"]) * k:
        raise CalibrationError(f"{cfg['id']}: ranks {n} != hosts x ranks_per_host")
    hosts = [topo.hosts[r // k] for r in range(n)]
    coll = cfg.get("collective", "all_reduce")
    factor = bus_factor(coll, n)
    out = []
    for row in cfg["rows"]:
        size = int(row["size"])
        prog = build_program(
            coll, m.get("algorithm"), n, size, ranks_per_host=k, size_convention="nccl"
        )
        t = float(estimate(prog, topo, hosts).time_s)
        if "time_us" in row:
            pub_t = float(row["time_us"]) * 1e-6
            pub_bw = size * factor / pub_t
        else:
            pub_bw = float(row["busbw_GBps"]) * 1e9
            pub_t = size * factor / pub_bw
        out.append(Row(cfg["id"], size, pub_t, pub_bw, t, size * factor / t))
    return out


def replace_table(doc: str, table: str) -> str:
    """``doc`` with the text between the table markers replaced by ``table``."""
    if TABLE_BEGIN not in doc or TABLE_END not in doc:
        raise CalibrationError("the document lacks the table markers")
    head, rest = doc.split(TABLE_BEGIN, 1)
    _, tail = rest.split(TABLE_END, 1)
    return f"{head}{TABLE_BEGIN}\n{table}\n{TABLE_END}{tail}"
