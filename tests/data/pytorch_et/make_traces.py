"""Write the PyTorch traces of tests/data/pytorch_et/ (run with a torch install; not a test).

Four ranks on the gloo backend (loopback TCP), a two-layer MLP: forward, backward, an async
all-reduce of every gradient with ``wait()``, an all-gather in a group of two ranks (0 and 2, or
1 and 3), a broadcast on the default group. One step is recorded by torch.profiler with
``ExecutionTraceObserver`` (host trace) and exported as a Kineto trace; ranks 0 and 1 are kept,
gzip-compressed. Made with torch 2.13.0+cpu::

    python -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch  # the CPU wheel
    /tmp/torchvenv/bin/python tests/data/pytorch_et/make_traces.py tests/data/pytorch_et
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

WORLD = 4
KEEP = (0, 1)


def _rank(rank: int, world: int, out: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29533"
    dist.init_process_group("gloo", rank=rank, world_size=world)
    pairs = [dist.new_group([r for r in range(world) if r % 2 == k]) for k in range(2)]
    pair = pairs[rank % 2]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
    et = ExecutionTraceObserver().register_callback(f"{out}/host_et.{rank}.json")
    with profile(activities=[ProfilerActivity.CPU], execution_trace_observer=et) as prof:
        model(torch.randn(32, 64)).sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, async_op=True).wait()
        shard = torch.ones(1000)
        parts = [torch.empty(1000) for _ in range(dist.get_world_size(pair))]
        dist.all_gather(parts, shard, group=pair)
        dist.broadcast(shard, src=0)
    prof.export_chrome_trace(f"{out}/kineto.{rank}.json")
    dist.barrier()
    dist.destroy_process_group()


def main(dest: str) -> None:
    """Record the job in a scratch directory and keep ranks ``KEEP``, gzip-compressed."""
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_rank, args=(WORLD, tmp), nprocs=WORLD)
        for r in KEEP:
            for kind in ("host_et", "kineto"):
                src, dst = f"{tmp}/{kind}.{r}.json", f"{dest}/{kind}.{r}.json.gz"
                with open(src, "rb") as f, gzip.open(dst, "wb", 9) as g:
                    shutil.copyfileobj(f, g)


if __name__ == "__main__":
    main(sys.argv[1])
