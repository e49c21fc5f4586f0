"""Workload generators: pure functions of parameters returning a ``Workload`` (no files).

``microbench``, ``data_parallel`` (``dp``), ``llm`` (TP/PP/DP, optional ZeRO) and ``moe``.
Write one with ``genie.workload.save_workload`` or ``genie workload generate``.
"""

from genie.workload.generators.data_parallel import data_parallel
from genie.workload.generators.llm import llm
from genie.workload.generators.microbench import microbench
from genie.workload.generators.moe import moe

GENERATORS = {"microbench": microbench, "dp": data_parallel, "llm": llm, "moe": moe}

__all__ = ["GENERATORS", "data_parallel", "llm", "microbench", "moe"]
