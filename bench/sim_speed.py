"""Simulator speed end to end: ``genie simulate`` (load + compile + replay + report) beside
ASTRA-sim 2.0's analytical backend on the same generated Chakra files.

For each workload kind (dp, llm, moe: ``genie workload generate KIND --ranks N``, whose files
ASTRA-sim runs directly, with their comm-group JSON) and size it runs ``python -m genie -q
simulate PREFIX --json`` in a fresh process (interpreter start-up counted) on the default
network (a switch, 50 GiB/s and 500 ns per link, programs priced by genie.collectives.cost with
fluid link sharing), and prints its wall time, CPU time (user + system, from the kernel's
accounting of the child) and max RSS, best of ``--repeat`` runs. With ``ASTRA_SIM_BIN`` (or
``--astra-bin``) naming an ASTRA-sim analytical binary, the same files run there too, on the
same switch (a Switch network of N NPUs, 50 GB/s meaning 2^30 B/s, 500 ns) with ring
all-reduce / reduce-scatter / all-gather and direct all-to-all (genie's defaults), one run each
(``--astra-timeout`` bounds it), and the ratio genie CPU / ASTRA-sim CPU is printed (goal: at
most 0.1). The iteration time each simulator reports is printed as a check that both ran the
workload (their network models differ: ASTRA-sim unaware shares no links).

Then the scaling curve: genie's CPU time for llm and moe at ``--scale`` ranks (the generators
keep nodes per rank fixed), and the exponent k of CPU ~ ranks^k fitted by least squares on
log-log: over all sizes (start-up included), and from 1,024 ranks up over the total less the
fixed cost of an 8-rank run of the same kind (start-up, imports), with the exponent between
successive sizes. Goal: k <= 1. The machine is shared: the load average is printed before and after.

Then the large sizes (``--big``, default 4,096 and 16,384 ranks of llm, ``--big-kinds``): each
generated once (its wall and CPU time and peak RSS printed), then ``genie simulate`` on each
``--topologies`` entry (default switch and leaf_spine: 2 leaves, 1 spine), printing CPU time
(user + system), peak RSS and wall time, against issue 33's goals: at 16,384 ranks under 20 s
CPU and 4 GB, at 4,096 ranks under 4 s (``--big-timeout`` bounds each run; a run cut there
prints its bound). ``--big ''`` skips them.

    ASTRA_SIM_BIN=/path/AstraSim_Analytical_Congestion_Unaware \\
      .venv/bin/python bench/sim_speed.py [--kinds dp,llm,moe] [--ranks 64,256,1024]
      [--scale 64,256,1024,2048,4096] [--repeat 2] [--astra-timeout 600]
      [--big 4096,16384] [--big-kinds llm] [--topologies switch,leaf_spine] [--big-timeout 900]
      [--reference]

Figures (issue 33, llm, CPU user+sys / peak RSS, this shared 2-core machine; before = commit
4c97177 (the session's start), after = HEAD with every helper's issue-33 work; under load 4-6
CPU times move by +-15 % run to run, so A/B pairs ran interleaved):
- 4,096 switch (text report, load ~1.5): 22.0 s / 1,124 MB -> 19.4 s / 754 MB.
- 16,384 switch --json: 150.0 s / 6,294 MB -> 196.1 s / 5,454 MB (same JSON; the after run
  under heavier load, so its CPU is no evidence of a slowdown: 4,096 interleaved says -12 %).
- leaf_spine (2 leaves, 1 spine) --json: 1,024 ranks 34.0 s / 470 MB -> 10.4 s / 244 MB;
  4,096 ranks cut after 8 min CPU before, 408 s / 2,236 MB with the line-rate replay's programs
  shared, 88.7 s / 1,905 MB with one-spine shapes priced once (each 1,024-member data-parallel
  ring all-reduce is still simulated flow by flow once: 2 M flows); 16,384 ranks after: 224.9 s
  / 6,426 MB (its 4,096-member rings pass the cost model's step limit and take the built-in
  traffic model; not run before).
- 64 ranks, best of 5 interleaved, bytecode cached (--pycache): dp 0.40 -> 0.37 s, llm 0.60 ->
  0.55 s, moe 0.38 -> 0.37 s (PYTHONDONTWRITEBYTECODE, best of 3 at load 4: 0.58 -> 0.58,
  0.81 -> 0.74, 0.61 -> 0.57); ASTRA-sim's analytical binary (issue's figures; not built here):
  dp 0.25 s, llm 0.12 s.
Goals not met: the replay is Python per node (~16 us a node, twice: the NCCL-like model and its
line-rate partner), and a 64-rank run is numpy's and rich's imports (~0.2 s) plus rich's tables.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GB = 2**30  # ASTRA-sim's "GB/s"
REMOTE_MEMORY = {"memory-type": "NO_MEMORY_EXPANSION"}
# genie's reference ASTRA-sim system file (ring collectives, 1 split), with genie's default
# all-to-all algorithm (direct) instead of ring
SYSTEM = {
    **json.loads((Path(__file__).parent.parent / "tests/data/astra/sys/ring_s1.json").read_text()),
    "all-to-all-implementation": ["direct"],
}


def timed(argv: list[str], timeout: float | None = None, cwd: str | None = None) -> dict:
    """Run ``argv``; its wall s, CPU s (user + system of the child), max RSS MB and stdout."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, cwd=cwd)
        deadline = None if timeout is None else t0 + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.perf_counter() > deadline:
                p.kill()
                os.wait4(p.pid, 0)
                return {"timeout": True, "wall": time.perf_counter() - t0}
            time.sleep(0.005)
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    return {
        "timeout": False,
        "rc": code,
        "wall": wall,
        "cpu": ru.ru_utime + ru.ru_stime,
        "rss_mb": ru.ru_maxrss / 1024,
        "out": text,
    }


def genie(*args: str) -> list[str]:
    """The command line of a genie subcommand in this interpreter."""
    return [sys.executable, "-m", "genie", "-q", *args]


def generate(kind: str, n: int, tmp: Path) -> Path:
    """Generated ASTRA-sim-compatible files for ``kind`` at ``n`` ranks; their prefix."""
    return generate_timed(kind, n, tmp)[0]


def generate_timed(kind: str, n: int, tmp: Path) -> tuple[Path, dict | None]:
    """``generate``, with the generator's ``timed`` figures (None: the files were there)."""
    prefix = tmp / f"{kind}{n}" / "w"
    if prefix.with_name("w.0.et").exists():
        return prefix, None
    prefix.parent.mkdir(parents=True, exist_ok=True)
    argv = genie("workload", "generate", kind, "--ranks", str(n), "--out", str(prefix))
    r = timed(argv)
    if r["rc"]:
        raise SystemExit(f"generate {kind} {n} failed ({r['rc']})")
    return prefix, r


def run_genie(
    prefix: Path, repeat: int, iteration: bool = True, extra: tuple[str, ...] = ()
) -> dict:
    """Best of ``repeat`` runs of ``genie simulate PREFIX`` (by CPU time; the default text
    report, as a user runs it); then, with ``iteration``, one untimed ``--json`` run for the
    iteration time and node count. ``extra``: more simulate options (a topology)."""
    best = None
    for _ in range(repeat):
        r = timed(genie("simulate", str(prefix), *extra))
        if r["rc"]:
            raise SystemExit(f"genie simulate {prefix} failed ({r['rc']})")
        if best is None or r["cpu"] < best["cpu"]:
            best = r
    if iteration:
        out = subprocess.run(
            genie("simulate", str(prefix), *extra, "--json", "--rows", "0"), capture_output=True
        )
        rep = json.loads(out.stdout)["reports"][0]
        best["iteration_s"] = rep["iteration_s"]
        best["nodes"] = rep["nodes"]
    return best


def run_astra(binary: str, prefix: Path, n: int, timeout: float) -> dict:
    """One ASTRA-sim run on the same files; its times and the last NPU's finish (s)."""
    d = prefix.parent
    net = d / "astra_net.yml"
    net.write_text(
        f"topology: [ Switch ]\nnpus_count: [ {n} ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n"
    )
    sysf = d / "astra_sys.json"
    sysf.write_text(json.dumps(SYSTEM))
    mem = d / "astra_mem.json"
    mem.write_text(json.dumps(REMOTE_MEMORY))
    argv = [
        binary,
        f"--workload-configuration={prefix}",
        f"--system-configuration={sysf}",
        f"--remote-memory-configuration={mem}",
        f"--network-configuration={net}",
    ]
    cg = prefix.with_name(prefix.name + ".comm_group.json")
    if cg.exists():
        argv.append(f"--comm-group-configuration={cg}")
    r = timed(argv, timeout, cwd=str(d))  # it writes a log/ folder in its working directory
    if r["timeout"]:
        return r
    cycles = [
        int(line.split("finished, ")[1].split(" cycles")[0])
        for line in r["out"].splitlines()
        if "finished, " in line and " cycles" in line
    ]
    r["iteration_s"] = max(cycles) * 1e-9 if cycles else math.nan  # 1 cycle = 1 ns
    return r


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(ys) on log(xs)."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(max(y, 1e-9)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / den if den else math.nan


# issue 33's goals for genie simulate of llm: ranks -> (CPU s, peak RSS MB or None)
BIG_GOALS = {4096: (4.0, None), 16384: (20.0, 4096.0)}


def run_big(sizes: list[int], args: argparse.Namespace, tmp: Path) -> None:
    """Generate and simulate the large sizes once each; print CPU, peak RSS, goals."""
    topologies = [t for t in args.topologies.split(",") if t]
    print(
        "\nlarge sizes, one run each (CPU = user + system; peak RSS of the process; "
        f"timeout {args.big_timeout:.0f} s)"
    )
    print(f"{'workload':<12}{'run':<22}{'wall':>9} {'CPU':>9} {'peak RSS':>10}  goal")
    for kind in [k for k in args.big_kinds.split(",") if k]:
        for n in sizes:
            prefix, gen = generate_timed(kind, n, tmp)
            name = f"{kind} {n}"
            if gen is not None:
                print(
                    f"{name:<12}{'workload generate':<22}{gen['wall']:>7.2f} s "
                    f"{gen['cpu']:>7.2f} s {gen['rss_mb']:>7.0f} MB",
                    flush=True,
                )
            variants = [("", ())]
            if args.reference:  # the full replay (no symmetry, no orbits) beside it
                variants.append((" full", ("--no-symmetry",)))
            for topo, (tag, extra) in ((t, v) for t in topologies for v in variants):
                argv = genie("simulate", str(prefix), "--topology", topo, *extra)
                r = timed(argv, args.big_timeout)
                label = f"simulate {topo}{tag}"
                if r["timeout"]:
                    print(
                        f"{name:<12}{label:<22}{'> ' + format(args.big_timeout, '.0f'):>7} s (cut)"
                    )
                    continue
                if r["rc"]:
                    print(f"{name:<12}{label:<22}failed ({r['rc']})")
                    continue
                cpu_goal, rss_goal = BIG_GOALS.get(n, (None, None))
                goal = "-"
                if cpu_goal is not None:
                    met = r["cpu"] <= cpu_goal and (rss_goal is None or r["rss_mb"] <= rss_goal)
                    within = f"<= {cpu_goal:.0f} s" + (
                        f", <= {rss_goal / 1024:.0f} GB" if rss_goal else ""
                    )
                    goal = f"{within}: {'met' if met else 'NOT met'}"
                print(
                    f"{name:<12}{label:<22}{r['wall']:>7.2f} s {r['cpu']:>7.2f} s "
                    f"{r['rss_mb']:>7.0f} MB  {goal}",
                    flush=True,
                )
            if not args.keep:  # the big ones only once: they take disk
                shutil.rmtree(tmp / f"{kind}{n}", ignore_errors=True)


def main() -> None:
    """Run the sizes and print the tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="dp,llm,moe")
    ap.add_argument("--ranks", default="64,256,1024")
    ap.add_argument("--scale", default="64,256,1024,2048,4096", help="'' to skip the curve")
    ap.add_argument("--scale-kinds", default="llm,moe")
    ap.add_argument("--repeat", type=int, default=2, help="genie runs per figure (best CPU)")
    ap.add_argument("--astra-bin", default=os.environ.get("ASTRA_SIM_BIN"))
    ap.add_argument("--astra-timeout", type=float, default=600.0, help="seconds per run")
    ap.add_argument("--keep", help="directory for the generated workloads (kept)")
    ap.add_argument("--big", default="4096,16384", help="large sizes ('' to skip)")
    ap.add_argument("--big-kinds", default="llm")
    ap.add_argument("--topologies", default="switch,leaf_spine", help="for the large sizes")
    ap.add_argument(
        "--reference",
        action="store_true",
        help="large sizes: also run --no-symmetry (the full replay the orbit replay stands for)",
    )
    ap.add_argument("--big-timeout", type=float, default=900.0, help="seconds per large run")
    ap.add_argument(
        "--pycache",
        help="run genie with its bytecode cached in this folder (PYTHONPYCACHEPREFIX), as an "
        "installed package runs; without it, PYTHONDONTWRITEBYTECODE=1 makes every start "
        "compile genie's sources again (~0.1-0.2 s of a 64-rank run)",
    )
    args = ap.parse_args()
    if args.pycache:
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = str(Path(args.pycache).resolve())
    kinds = [k for k in args.kinds.split(",") if k]
    ranks = [int(x) for x in args.ranks.split(",") if x]
    scale = [int(x) for x in args.scale.split(",") if x]
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} (shared machine)")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("PYTHONDONTWRITEBYTECODE is set: start-up includes compiling genie (--pycache DIR)")
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="genie-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    astra = args.astra_bin
    if astra and not Path(astra).is_file():
        raise SystemExit(f"ASTRA-sim binary {astra} not found")
    try:
        print(
            "\nend to end, same ET files (genie: load + compile + replay + report, interpreter "
            "start-up counted; CPU = user + system)"
        )
        head = (
            f"{'workload':<10}{'nodes':>9}  {'genie wall':>10} {'CPU':>8} {'max RSS':>9} "
            f"{'iteration':>11}"
        )
        if astra:
            head += f"  {'ASTRA wall':>10} {'CPU':>9} {'max RSS':>9} {'iteration':>11}  ratio"
        print(head)
        ratios = []
        for kind in kinds:
            for n in ranks:
                prefix = generate(kind, n, tmp)
                g = run_genie(prefix, args.repeat)
                line = (
                    f"{kind + ' ' + str(n):<10}{g['nodes']:>9,}  {g['wall']:>8.2f} s "
                    f"{g['cpu']:>6.2f} s {g['rss_mb']:>6.0f} MB {g['iteration_s'] * 1e3:>8.3f} ms"
                )
                if astra:
                    a = run_astra(astra, prefix, n, args.astra_timeout)
                    if a["timeout"]:
                        line += f"  {'> ' + format(args.astra_timeout, '.0f') + ' s':>10} (timeout)"
                        ratios.append((kind, n, g["cpu"] / args.astra_timeout, True))
                    else:
                        ratio = g["cpu"] / max(a["cpu"], 1e-9)
                        ratios.append((kind, n, ratio, False))
                        line += (
                            f"  {a['wall']:>8.2f} s {a['cpu']:>7.2f} s {a['rss_mb']:>6.0f} MB "
                            f"{a['iteration_s'] * 1e3:>8.3f} ms  {ratio:.3f}"
                        )
                print(line, flush=True)
        if astra:
            met = [r for r in ratios if r[2] <= 0.1]
            print(
                f"goal genie CPU <= 0.1 x ASTRA-sim CPU: met on {len(met)} of {len(ratios)} "
                "(a timed-out ASTRA-sim run counts at its timeout: the ratio is an upper bound)"
            )
            for kind, n, ratio, cut in ratios:
                mark = "<=" if cut else "="
                verdict = "met" if ratio <= 0.1 else "NOT met"
                print(f"  {kind} {n}: ratio {mark} {ratio:.3f}  {verdict}")
        else:
            print("(no ASTRA_SIM_BIN given: ASTRA-sim columns left out)")
        big = [int(x) for x in args.big.split(",") if x]
        if big:
            run_big(big, args, tmp)
        if scale:
            print(
                "\nscaling at fixed nodes per rank (genie CPU s; best of "
                f"{args.repeat}); k: CPU ~ ranks^k"
            )
            for kind in [k for k in args.scale_kinds.split(",") if k]:
                base = run_genie(generate(kind, 8, tmp), args.repeat, False)["cpu"]
                cpus = []
                rss = []
                for n in scale:
                    prefix = generate(kind, n, tmp)
                    g = run_genie(prefix, args.repeat, False)
                    cpus.append(g["cpu"])
                    rss.append(g["rss_mb"])
                    if n > 1024 and not args.keep:  # the big ones only once: they take disk
                        shutil.rmtree(tmp / f"{kind}{n}", ignore_errors=True)
                k_total = slope(scale, cpus)
                big = [(n, c - base) for n, c in zip(scale, cpus, strict=True) if n >= 1024]
                k_marg = slope(*zip(*big, strict=True)) if len(big) > 1 else math.nan
                curve = ", ".join(
                    f"{n}: {c:.2f} s ({m:.0f} MB)" for n, c, m in zip(scale, cpus, rss, strict=True)
                )
                pts = list(zip(scale, cpus, strict=True))
                steps = ", ".join(
                    f"{a}->{b}: {slope([a, b], [ca - base, cb - base]):.2f}"
                    for (a, ca), (b, cb) in itertools.pairwise(pts)
                )
                print(
                    f"  {kind}: {curve}\n    k = {k_total:.2f} over all sizes (total CPU); "
                    f"{k_marg:.2f} from 1,024 ranks up, less the {base:.2f} s of an 8-rank run "
                    f"(start-up, imports); between sizes: {steps}; goal k <= 1: "
                    f"{'n/a' if math.isnan(k_marg) else 'met' if k_marg <= 1.0 else 'NOT met'}"
                )
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
