"""What ``genie simulate A B ...`` and ``genie emulate A B ...`` print for several jobs: per job
its iteration alone and together and the slowdown, and the links the jobs contended on (the
documents come from ``genie.api.jobs``)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from genie.units import format_bytes, format_seconds


def print_jobs(con: Console, doc: dict) -> None:
    """The per-job table (alone, together, slowdown) and the links the jobs contended on."""
    t = Table(title=f"jobs on one fabric ({doc['model']})", title_justify="left")
    for c in ("job", "ranks", "hosts", "start", "alone", "together", "slowdown"):
        t.add_column(c, justify="left" if c in ("job", "hosts") else "right")
    t.add_column("exposed comm alone / together", justify="right")
    for j in doc["jobs"]:
        t.add_row(
            *job_cells(j),
            *slowdown_cells(j),
            seconds_pair(j["exposed_comm_alone_s"], j["exposed_comm_together_s"]),
        )
    con.print(t)
    print_contended(con, doc)


def job_cells(j: dict) -> list[str]:
    """A job row's first cells: name, ranks, hosts, start."""
    return [j["name"], f"{j['ranks'][0]}-{j['ranks'][1]}", j["hosts"], format_seconds(j["start_s"])]


def slowdown_cells(j: dict, prefix: str = "") -> list[str]:
    """A job row's ``PREFIXalone_s``, ``PREFIXtogether_s`` and ``PREFIXslowdown`` cells."""
    return [
        format_seconds(j[f"{prefix}alone_s"]),
        format_seconds(j[f"{prefix}together_s"]),
        f"{j[f'{prefix}slowdown']:.2f}x",
    ]


def seconds_pair(a: float, b: float) -> str:
    """``a / b`` in seconds' units."""
    return f"{format_seconds(a)} / {format_seconds(b)}"


def print_contended(con: Console, doc: dict) -> None:
    """The hosts several jobs share and the links they contended on (``jobs_doc``)."""
    if doc["shared_hosts"]:
        con.print(f"hosts shared by several jobs: {doc['shared_hosts']}")
    if not doc["contended_links"]:
        con.print("no fabric link carried more than one job's bytes")
        return
    lt = Table(
        title="links the jobs contended on (carrying bytes of several jobs; saturated = at "
        "capacity, setting the pace)",
        title_justify="left",
    )
    for c in ("link", "bytes by job", "capacity", "saturated together", "alone (max)"):
        lt.add_column(c, justify="left" if c in ("link", "bytes by job") else "right")
    for x in doc["contended_links"]:
        lt.add_row(
            x["link"],
            ", ".join(f"{k} {format_bytes(v)}" for k, v in x["bytes_by_job"].items()),
            f"{x['capacity_Bps'] / 1e9:.2f} GB/s",
            f"{x['saturated_together_share']:.0%} of the makespan",
            f"{x['saturated_alone_share']:.0%}",
        )
    con.print(lt)
