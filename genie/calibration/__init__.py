"""Calibration: fit the cost model to what a fabric measured, and say how far the model is off.

* ``model``: a ``Calibration`` (per link class: latency per hop, fraction of line rate, per-message
  cost; the per-step software overhead; each with its uncertainty) and how it prices a topology;
* ``fit``: the fit itself, pure (numpy least squares on the model's own critical-path terms),
  with held-back points and the MAPE before and after;
* ``runs``: stored ``genie bench`` runs as fit points (median time per size);
* ``accuracy``: measured vs nominal vs calibrated rows and their error in percent;
* ``dilation``: what time dilation keeps and what it does not;
* ``compute``: compute durations from the roofline (or timed on a local accelerator);
* ``published``: genie's model against published nccl-tests results on real GPU clusters.
"""
