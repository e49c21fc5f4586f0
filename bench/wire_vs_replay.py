"""Does ``genie emulate`` run on the wire what the simulator replays? Wire vs replay, per shape.

For each workload shape (data parallel with each ``--comm-concurrency`` and with dilation, TP+DP,
pipelines of 2 and 4 stages, MoE with even and skewed all-to-alls, and a 64-rank GPT step on 8
hosts of 8 ranks each), ``genie emulate --mode overlapped`` on a netns star of 200 Mbit/s links
(1 Gbit/s for the GPT step; namespace prefix ``genie-wr-``, removed at the end, even on failure),
and per row:

* ``wire``: the median makespan of the measured runs (common start to the last op's end);
* ``replay comm``: when the last communication ends in the replay with the measured times,
  which is what the wire's makespan is comparable with;
* ``replay iter`` and ``model iter``: the iteration replayed with the measured times and with
  the analytical model (the compute after the last communication included);
* ``wire / comm``: near 1 when the op lists ran what the replay replays.

A ratio far from 1 in one run and not the next is the wire (two-way TCP through the tbf queues
stalls now and then); far from 1 every time is a planning fault. Needs root.

    sudo .venv/bin/python bench/wire_vs_replay.py               # every shape, twice
    sudo .venv/bin/python bench/wire_vs_replay.py pp2 moe4 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import genie  # noqa: E402
from genie.live.overlapped import Overlapped  # noqa: E402
from genie.testbed import load_testbed  # noqa: E402
from genie.workload import save_workload  # noqa: E402
from genie.workload.generators import data_parallel  # noqa: E402
from genie.workload.generators.llm import llm  # noqa: E402
from genie.workload.generators.moe import moe  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from netns_fidelity import agents_up  # noqa: E402

PREFIX = "genie-wr-"
FLOPS = 1e11  # peak FLOP/s: compute gaps of milliseconds, alike with the links' times


def _dp():
    return data_parallel(2, layers=4, hidden=256, bucket_bytes=1 << 19, peak_flops=1e12)


def _llm(ranks: int, tp: int, pp: int, mb: int, seq: int):
    return llm(
        ranks, tp=tp, pp=pp, layers=4 if pp > 1 else 2, hidden=256, seq=seq, micro_batches=mb,
        peak_flops=FLOPS,
    )  # fmt: skip


def _moe(skew: float):
    return moe(4, layers=2, hidden=256, seq=256, batch=1, peak_flops=FLOPS, expert_skew=skew)


def _gpt64():
    return llm(
        64, tp=8, pp=2, layers=8, hidden=512, seq=256, micro_batches=4, peak_flops=FLOPS,
    )  # fmt: skip


# shape: (workload, hosts, link rate, emulate options beyond the defaults[, ranks per host])
SHAPES: dict[str, tuple] = {
    "dp2": (_dp, 2, "200mbit", {}),
    "dp2 cc0": (_dp, 2, "200mbit", {"comm_concurrency": 0}),
    "dp2 cc2": (_dp, 2, "200mbit", {"comm_concurrency": 2}),
    "dp2 dil2": (_dp, 2, "100mbit", {"dilation": 2.0}),
    "tp2dp2": (lambda: _llm(4, 2, 1, 1, 256), 4, "200mbit", {}),
    "pp2": (lambda: _llm(2, 1, 2, 4, 512), 2, "200mbit", {}),
    "pp4": (lambda: _llm(4, 1, 4, 4, 512), 4, "200mbit", {}),
    "moe4": (lambda: _moe(0.0), 4, "200mbit", {}),
    "moe4 skew": (lambda: _moe(1.0), 4, "200mbit", {}),
    # 8 servers x 8 ranks (intra-host steps modelled), GPT tp 8, pp 2, dp 4, 4 micro-batches;
    # compute dilated 16x: on a 2-core machine 64 rank threads keep time only so (at 4x the
    # wire ran 14-18 % over the replay: ranks waiting for a core, not the network)
    "gpt64": (_gpt64, 8, "1gbit", {"dilation": 16.0}, 8),
    "gpt64 dil4": (_gpt64, 8, "1gbit", {"dilation": 4.0}, 8),
}


def row(d: Path, path: Path, prefix: Path, extra: dict[str, float]) -> dict[str, float]:
    """One overlapped emulation (``genie.live``); its wire and replay figures, seconds."""
    spec = genie.EmulateSpec(
        workload=str(prefix),
        testbed=str(path),
        store=str(d / "runs.sqlite"),
        iterations=5,
        warmup=1,
        calibration="none",
        command="bench/wire_vs_replay.py",
    ).replace(**extra)
    o = genie.emulate(spec)
    assert isinstance(o, Overlapped) and o.replay_comm_end_s is not None
    return {
        "wire": statistics.median(r["makespan_s"] for r in o.runs if not r["warmup"]),
        "comm": o.replay_comm_end_s,
        "replay": o.reports[0].iteration_s,
        "model": o.reports[1].iteration_s,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="*", help=f"some of: {', '.join(SHAPES)} (default: all)")
    ap.add_argument("--repeat", type=int, default=2, help="emulate runs per shape (default 2)")
    a = ap.parse_args(argv)
    wanted = a.shapes or list(SHAPES)
    unknown = [s for s in wanted if s not in SHAPES]
    if unknown:
        ap.error(f"unknown shape(s) {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    d = Path(tempfile.mkdtemp(prefix="genie-wr-"))
    os.environ.setdefault("GENIE_STATE_DIR", str(d / "genie-state"))
    print("ms per row: wire p50 | replay comm end | replay iteration | model iteration | wire/comm")
    by_testbed: dict[tuple[int, str, int], list[str]] = {}
    for s in wanted:
        per_host = SHAPES[s][4] if len(SHAPES[s]) > 4 else 1
        by_testbed.setdefault((SHAPES[s][1], SHAPES[s][2], per_host), []).append(s)
    for (hosts, rate, per_host), shapes in by_testbed.items():
        path = d / f"wr{hosts}-{rate}-{per_host}.toml"
        path.write_text(
            f'[testbed]\nname = "wr{hosts}"\nkind = "netns"\nnetns_prefix = "{PREFIX}"\n'
            f'[topology]\nshape = "star"\nhosts = {hosts}\nrate = "{rate}"\n'
            f"ranks_per_host = {per_host}\n"
        )
        tb = load_testbed(path)
        with agents_up(tb, prefix=PREFIX):
            for s in shapes:
                make, extra = SHAPES[s][0], SHAPES[s][3]
                prefix = d / s.replace(" ", "-")
                save_workload(make(), prefix)
                for k in range(a.repeat):
                    r = {key: v * 1e3 for key, v in row(d, path, prefix, extra).items()}
                    print(
                        f"{s:>9} ({hosts} hosts, {rate}) run {k + 1}: {r['wire']:7.1f} | "
                        f"{r['comm']:7.1f} | {r['replay']:7.1f} | {r['model']:7.1f} | "
                        f"{r['wire'] / r['comm']:.3f}",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
