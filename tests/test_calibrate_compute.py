"""Compute calibration (``genie.calibrate_compute``, ``genie calibrate compute``): durations from
shapes (roofline here; a timer where a GPU is), written to new files only."""

from __future__ import annotations

import hashlib

import pytest

import genie
from genie.calibration.compute import (
    DEVICES,
    Gemm,
    Opaque,
    Roofline,
    apply,
    llm_dims,
    llm_gemms,
    rewrite,
)
from genie.cli import main
from genie.errors import UsageError
from genie.workload import load_workload, save_workload
from genie.workload.generators import data_parallel
from genie.workload.generators.llm import llm

H100 = Roofline(*DEVICES["h100"], device="h100")


def _digest(paths) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.read_bytes())
    return h.hexdigest()


def test_llm_shapes_carry_exactly_the_generators_flops():
    wl = llm(4, tp=2, pp=2, layers=2, hidden=1024, seq=256, micro_batches=1)
    dims = llm_dims(wl)
    assert dims == {"hidden": 1024, "seq": 256, "micro_batch_size": 1, "tp": 2}
    h, s, tp = 1024, 256, 2
    block_fwd = (24 * s * h * h + 4 * s * s * h) / tp
    fwd = sum(g.flops for half in ("attn", "mlp") for g in llm_gemms(dims, "fwd", half))
    bwd = sum(g.flops for half in ("attn", "mlp") for g in llm_gemms(dims, "bwd", half))
    assert fwd == pytest.approx(block_fwd) and bwd == pytest.approx(2 * block_fwd)
    # the backward GEMMs are the forward ones transposed (input and weight gradients)
    g = llm_gemms(dims, "fwd", "mlp")[0]
    assert Gemm(g.m, g.k, g.n) in llm_gemms(dims, "bwd", "mlp")


def test_roofline_rewrite_and_a_timer_where_an_accelerator_would_be():
    wl = llm(4, tp=2, pp=2, layers=2, hidden=1024, seq=256, micro_batches=1)
    rw = rewrite(wl, H100)
    assert rw.sources == {"model dims": 16, "num_ops/tensor_size": 4}
    node = next(n for n in wl.ranks[0].nodes if n.name.startswith("fwd_L0_mlp"))
    want = sum(H100(g) for g in llm_gemms(llm_dims(wl), "fwd", "mlp"))
    assert rw.durations[(0, node.id)] == pytest.approx(want)
    opt = next(n for n in wl.ranks[0].nodes if n.name == "optimizer_step")
    flops = next(a.value for a in opt.attrs if a.name == "num_ops")
    size = next(a.value for a in opt.attrs if a.name == "tensor_size")
    assert rw.durations[(0, opt.id)] == pytest.approx(H100(Opaque(flops, size)))
    # a timer (the GPU's place in a test): GEMMs take what it says, the rest the roofline
    timed = rewrite(wl, H100, (lambda g: 1e-3, "test timer"))
    n_gemms = len(llm_gemms(llm_dims(wl), "fwd", "mlp"))
    assert timed.durations[(0, node.id)] == pytest.approx(n_gemms * 1e-3)
    assert timed.durations[(0, opt.id)] == rw.durations[(0, opt.id)]
    assert all(d["timed_s"] == 1e-3 for op, d in timed.shapes.items() if isinstance(op, Gemm))
    apply(wl, rw)
    assert node.duration_micros == round(want * 1e6)


def test_calibrate_compute_writes_new_files_and_never_touches_the_input(tmp_path):
    src = tmp_path / "dp"
    files = save_workload(data_parallel(2, layers=1, hidden=256, seq=64, batch=2), src)
    before = _digest(files)
    out = tmp_path / "new" / "dp"
    spec = genie.CalibrateComputeSpec(
        workload=str(src), out=str(out), device="a100", use_accelerator=False
    )
    res = genie.calibrate_compute(spec)
    assert not res.timed and "roofline of a100" in res.rewrite.roofline
    assert res.out == out and sorted(res.files) == sorted(out.parent.glob("dp.*.et"))
    assert _digest(files) == before
    old, new = load_workload(src), load_workload(out)
    peak, mem = DEVICES["a100"]
    rewritten = 0
    for a, b in zip(old.ranks[0].nodes, new.ranks[0].nodes, strict=True):
        flops = next((x.value for x in a.attrs if x.name == "num_ops"), None)
        if flops:
            size = next((x.value for x in a.attrs if x.name == "tensor_size"), 0)
            assert b.duration_micros == max(1, round(max(flops / peak, size / mem) * 1e6))
            rewritten += 1
        else:
            assert b.duration_micros == a.duration_micros
    assert rewritten == 3  # fwd, bwd, optimizer
    # per rank before and after: the trace's durations, then the roofline's
    trace, now = res.per_rank_s()
    assert trace == pytest.approx(sum(res.rewrite.old.values()) / 2)
    assert now == pytest.approx(sum(res.rewrite.durations.values()) / 2)
    ops = res.operations()
    assert sum(op.nodes for op in ops) == len(res.rewrite.durations) == 2 * rewritten
    assert all(op.timed_s is None and not op.gemm for op in ops)
    doc = res.to_dict()
    assert doc["nodes_rewritten"] == 6 and doc["timer"] is None and len(doc["files"]) == 2
    # refusals: never over existing files, never in place, a device it knows
    with pytest.raises(UsageError, match="exists"):
        genie.calibrate_compute(spec)
    with pytest.raises(UsageError, match="input's own prefix"):
        genie.calibrate_compute(spec.replace(out=str(src)))
    with pytest.raises(UsageError, match="--device 'z'"):
        genie.calibrate_compute(spec.replace(out=str(tmp_path / "x"), device="z"))
    with pytest.raises(UsageError, match="needs --out"):
        genie.calibrate_compute(spec.replace(out=""))


def test_the_roofline_takes_the_numbers_given_over_the_device_preset(tmp_path):
    from genie.api.calibration import roofline

    spec = genie.CalibrateComputeSpec(workload="w", out="o", device="H200")
    assert roofline(spec) == Roofline(*DEVICES["h200"], device="h200")
    mine = roofline(spec.replace(peak_flops=1e14, memory_bandwidth="1TB/s", efficiency=0.5))
    assert mine == Roofline(1e14, 1e12, 0.5, device="")  # not a preset any more: no name


def test_cli_writes_new_files_and_says_what_priced_them(tmp_path, capsys):
    src = tmp_path / "dp"
    save_workload(data_parallel(2, layers=1, hidden=256, seq=64, batch=2), src)
    out = tmp_path / "new" / "dp"
    assert main(["calibrate", "compute", str(src), "--out", str(out), "--device", "a100"]) == 0
    text = capsys.readouterr().out
    assert "roofline of a100" in text and "per distinct operation" in text
    assert f"wrote 2 files: {out}.*.et (the input is unchanged)" in " ".join(text.split())
    assert load_workload(out).n_ranks == 2
    assert main(["calibrate", "compute", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exists" in err[0]
    assert main(["calibrate", "compute", str(src), "--out", str(tmp_path / "x"), "--device", "z"])
    assert "--device" in capsys.readouterr().err
