"""Example models for ``genie capture jax`` (each follows the entry-point convention of
``genie.capture.jax_runner``): ``mlp_dp:train_step`` (data parallel), ``mlp_dp:fsdp_step``
(parameters sharded, ZeRO-3 style), ``transformer_tp:block`` (Megatron tensor parallel).
"""
