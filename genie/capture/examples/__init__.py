"""Example models for ``genie capture jax`` (each follows the entry-point convention of
``genie.capture.jax_runner``): ``mlp_dp:train_step`` (data parallel), ``mlp_dp:fsdp_step``
(parameters sharded, ZeRO-3 style), ``transformer_tp:block`` and ``transformer_tp:train_step``
(Megatron tensor parallel, forward / training step), ``stacked_mlp:train_step`` (layers under
``lax.scan``), ``collectives_mix:mix`` (explicit permute, all-to-all, reduce-scatter,
all-gather under ``shard_map``).
"""
