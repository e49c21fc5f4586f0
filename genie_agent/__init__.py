"""genie's per-host agent: control loop, data-plane transports, measurement."""
