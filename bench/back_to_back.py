"""Back-to-back bench iterations on a shaped netns star: what an iteration's time counts.

A Go runs a size's iterations back to back; a rank whose sends its kernel took begins the next
iteration while its peer still finishes this one. This prints, per Go (``genie bench`` on a
2-host netns star, namespace prefix ``genie-bb-``, removed at the end, even on failure), the p50
of three readings of the same iterations, beside the nominal model:

* ``genie``: the time genie reports (from the iteration's start, or the previous iteration's
  end when that is later, to its end; ``genie.controller.results``);
* ``start-to-end``: earliest rank start to last rank end (what genie reported before; it
  counts a rank's run-ahead on top of the transfer);
* ``period``: between consecutive last-rank ends (nccl-tests' time per iteration);

and the largest spread of the ranks' starts. Needs root.

    sudo .venv/bin/python bench/back_to_back.py                       # all_to_all and all_reduce
    sudo .venv/bin/python bench/back_to_back.py --size 1MiB --goes 5 --rate 400mbit
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from genie.cli import main as genie  # noqa: E402
from genie.store import RunStore  # noqa: E402
from genie.testbed import load_testbed  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from netns_fidelity import agents_up  # noqa: E402

PREFIX = "genie-bb-"


def readings(rank_times: list[list[list[int]]]) -> dict[str, list[float]]:
    """Per iteration (warm-up first) [[rank, start, end], ...] -> the three readings, seconds."""
    starts = [min(s for _, s, _ in it) for it in rank_times]
    ends = [max(e for _, _, e in it) for it in rank_times]
    out: dict[str, list[float]] = {"genie": [], "start-to-end": [], "period": [], "skew": []}
    for i, it in enumerate(rank_times):
        began = starts[i] if i == 0 else max(starts[i], ends[i - 1])
        out["genie"].append((ends[i] - began) / 1e9)
        out["start-to-end"].append((ends[i] - starts[i]) / 1e9)
        out["period"].append((ends[i] - (ends[i - 1] if i else starts[i])) / 1e9)
        out["skew"].append((max(s for _, s, _ in it) - starts[i]) / 1e9)
    return out


def one_go(path: Path, store: Path, coll: str, size: str, iters: int) -> tuple[dict, float]:
    """One ``genie bench`` Go; (readings of its measured iterations, nominal model s)."""
    args = ["bench", "--testbed", str(path), "--collective", coll, "--sizes", size, "--json"]
    args += ["--iters", str(iters), "--warmup", "1", "--store", str(store)]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        if genie([*args, "--calibration", "none"]) != 0:
            raise SystemExit(f"genie bench failed on {coll} {size}")
    doc = json.loads(buf.getvalue())
    with RunStore(store) as st:
        rows = st.instances(doc["run_id"], include_warmup=True)
    rows.sort(key=lambda x: x["iteration"])
    r = readings([x["rank_times"] for x in rows])
    return {k: v[1:] for k, v in r.items()}, doc["rows"][0]["modeled_s"]  # warm-up dropped


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="2MiB", help="collective size (default 2MiB)")
    ap.add_argument("--rate", default="200mbit", help="link rate (default 200mbit)")
    ap.add_argument("--goes", type=int, default=3, help="Go's per collective (default 3)")
    ap.add_argument("--iters", type=int, default=12, help="measured iterations per Go")
    a = ap.parse_args(argv)
    d = Path(tempfile.mkdtemp(prefix="genie-bb-"))
    os.environ.setdefault("GENIE_STATE_DIR", str(d / "genie-state"))
    path = d / "bb.toml"
    path.write_text(
        f'[testbed]\nname = "bb"\nkind = "netns"\nnetns_prefix = "{PREFIX}"\n'
        f'[topology]\nshape = "star"\nhosts = 2\nrate = "{a.rate}"\n'
    )
    tb = load_testbed(path)
    print(f"2-host netns star at {a.rate}, {a.size}, {a.iters} iterations per Go after 1 warm-up")
    print("p50 per Go, ms:   genie | start-to-end | period | model (nominal) | max start skew")
    with agents_up(tb, prefix=PREFIX):
        for coll in ("all_to_all", "all_reduce"):
            for g in range(a.goes):
                r, model = one_go(path, d / "runs.sqlite", coll, a.size, a.iters)
                p50 = {k: statistics.median(v) * 1e3 for k, v in r.items()}
                print(
                    f"{coll:>10} Go {g + 1}: {p50['genie']:7.1f} | {p50['start-to-end']:12.1f} | "
                    f"{p50['period']:6.1f} | {model * 1e3:15.1f} | {max(r['skew']) * 1e3:.1f} ms",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
