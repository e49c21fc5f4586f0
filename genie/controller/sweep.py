"""A collective size sweep on a live testbed (nccl-tests for a testbed), beside the cost model.

Per size: plan the program (nccl-tests size convention: ``size`` is the whole buffer), prepare
it on the agents (connections and buffers), run warm-up + measured iterations starting in sync,
store every instance, release. Rows carry p50/p99/min/max of completion time, algbw and busbw
(bytes/s; print them as GB/s = 1e9 B/s) and the cost model's time for the same program.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec

from genie.collectives import build_program
from genie.collectives.cost import estimate, nccl_size
from genie.collectives.program import Program
from genie.controller.results import Instance, Stats, measured, spread, stats
from genie.controller.session import Controller
from genie.errors import GenieError
from genie.vocabulary import algbw, bus_factor
from genie.wire.messages import DataOptions

BATCH_S = 1.0  # with a per-batch callback: about this long per Go


@dataclass
class SizeRow:
    """One size of a sweep."""

    size: int  # whole buffer, bytes
    count: int  # elements (uint8)
    dtype: str
    n_ranks: int
    stats: Stats
    algbw: float  # bytes/s at p50
    busbw: float  # bytes/s at p50
    modeled_s: float | None
    instances: list[Instance] = field(default_factory=list)
    calibrated_s: float | None = None  # the model with a calibration (None: none given)
    repeat_p50_s: list[float] = field(default_factory=list)  # per repeat its p50 (repeats > 1)

    @property
    def spread(self) -> float | None:
        """How far the repeats' p50s lie apart: max / min - 1 (None without repeats)."""
        return spread(self.repeat_p50_s)

    @property
    def ratio(self) -> float | None:
        """Measured p50 / modeled time."""
        if not self.modeled_s:
            return None
        return self.stats.p50 / self.modeled_s


def plan_sizes(
    collective: str,
    algorithm: str | None,
    n_ranks: int,
    sizes: Sequence[int],
    *,
    chunks: int = 1,
    ranks_per_host: int = 1,
) -> list[Program]:
    """One program per size, nccl-tests size convention."""
    return [
        build_program(
            collective,
            algorithm,
            n_ranks,
            s,
            chunks=chunks,
            ranks_per_host=ranks_per_host,
            size_convention="nccl",
        )
        for s in sizes
    ]


def modeled_time(program: Program, topology, placement: Sequence[str]) -> float | None:
    """Cost-model time of ``program`` on ``topology`` (None if the model cannot price it)."""
    if topology is None:
        return None
    try:
        return float(estimate(program, topology, list(placement[: program.n_ranks])).time_s)
    except GenieError:
        return None


def run_size(
    ctl: Controller,
    program: Program,
    placement: Sequence[str],
    *,
    iters: int,
    warmup: int,
    options: DataOptions | None = None,
    record_steps: bool = False,
    on_instances: Callable[[list[Instance]], None] | None = None,
    batch_s: float = BATCH_S,
    on_start: Callable[[int], None] | None = None,
) -> list[Instance]:
    """Prepare, run and release one program; return all its instances (warm-up flagged).

    With ``on_instances`` the iterations are split over several Gos, each expected to last
    about ``batch_s`` (judged from the Gos so far), and every Go's instances are handed over as
    soon as it ends: a store written from it loses at most one batch to a crash. Iterations
    within a Go run back to back; Gos start in sync like the first.

    With ``on_start`` the warm-up iterations run in a Go of their own first, and every Go of
    measured iterations tells ``on_start`` its common start (controller clock ns) before it is
    sent: the first such call is the start of the first measured iteration.
    """
    ctl.prepare([program], list(placement), options)
    got: list[Instance] = []

    def go(
        n: int, w: int, start: Callable[[int], None] | None, warm: bool = False
    ) -> list[Instance]:
        batch = ctl.run(0, iters=n, warmup=w, record_steps=record_steps, on_start=start).instances
        for x in batch:
            x.iteration += len(got)
            x.warmup = x.warmup or warm  # flagged before they are handed over (and stored)
        got.extend(batch)
        if on_instances is not None:
            on_instances(batch)
        return batch

    try:
        if on_start is not None and warmup:
            go(warmup, 0, None, warm=True)  # warm-ups alone: measured Gos start the clock
            warmup = 0
        if on_instances is None:
            go(iters, warmup, on_start)
        else:
            done, spent = 0, 0.0
            while done < iters:
                n = 1 if done == 0 else max(1, min(iters - done, int(batch_s * done / spent)))
                measured_now = [
                    x for x in go(n, warmup if done == 0 else 0, on_start) if not x.warmup
                ]
                spent += max(1e-9, sum(x.time_s for x in measured_now))
                done += len(measured_now)
                if not measured_now:
                    break  # an agent returned no iterations: nothing more will come
    except BaseException:
        ctl.abort("interrupted")
        raise
    ctl.release()
    return got


def _renumbered(xs: list[Instance], base: int) -> list[Instance]:
    """``xs`` with their iterations counted from ``base`` (a later repeat's)."""
    return [msgspec.structs.replace(x, iteration=x.iteration + base) for x in xs]


def _hand_over(
    on_instances: Callable[[Program, list[Instance]], None],
    prog: Program,
    base: int,
    xs: list[Instance],
) -> None:
    """Hand a batch of ``prog`` over, renumbered from ``base``."""
    on_instances(prog, _renumbered(xs, base))


def sweep(
    ctl: Controller,
    programs: Sequence[Program],
    placement: Sequence[str],
    *,
    iters: int,
    warmup: int,
    options: DataOptions | None = None,
    topology=None,
    on_size: Callable[[SizeRow], None] | None = None,
    on_instances: Callable[[Program, list[Instance]], None] | None = None,
    calibrated=None,
    model_placement: Sequence[str] | None = None,
    on_start: Callable[[int], None] | None = None,
    repeats: int = 1,
) -> list[SizeRow]:
    """Run every program in turn; ``on_size`` sees each row as soon as it is measured.

    ``repeats`` > 1 runs each size that many times over (each its own prepare, warm-up and
    iterations): the row's statistics are over every measured iteration, and
    ``repeat_p50_s`` says how far the repeats' own p50s lie apart.

    ``topology`` prices the model column; ``calibrated`` (a calibrated topology) a second one.
    ``model_placement``: the topology host (NIC endpoint) of each rank for the model columns
    (default ``placement``, right where every host has one NIC).

    With ``on_instances`` each program's iterations run in batches (see ``run_size``) and every
    batch is handed over with its program as soon as it ends, so a store loses at most one batch.
    ``on_start``: told every measured Go's common start (see ``run_size``).
    """
    rows = []
    for prog in programs:
        inst: list[Instance] = []
        p50s: list[float] = []
        for k in range(max(1, repeats)):
            base = k * (iters + warmup)  # iterations numbered across repeats
            hand = None
            if on_instances is not None:
                hand = functools.partial(_hand_over, on_instances, prog, base)
            got = run_size(
                ctl,
                prog,
                placement,
                iters=iters,
                warmup=warmup,
                options=options,
                on_instances=hand,
                on_start=on_start if k == 0 else None,
            )
            p50s.append(stats(measured(got)).p50)
            inst += _renumbered(got, base)
        st = stats(measured(inst))
        size = nccl_size(prog)
        bw = algbw(size, st.p50)
        row = SizeRow(
            size=size,
            count=size,
            dtype="uint8",
            n_ranks=prog.n_ranks,
            stats=st,
            algbw=bw,
            busbw=bw * bus_factor(prog.spec.collective, prog.n_ranks),
            modeled_s=modeled_time(prog, topology, model_placement or placement),
            instances=inst,
            calibrated_s=modeled_time(prog, calibrated, model_placement or placement),
            repeat_p50_s=p50s if repeats > 1 else [],
        )
        rows.append(row)
        if on_size:
            on_size(row)
    return rows
