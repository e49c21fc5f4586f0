"""The wire: what the controller and the agents say to each other, and nothing else.

A neutral package both sides import (the controller never imports ``genie_agent``;
``genie_agent`` never imports the controller or the CLI): ``messages`` (the typed control
messages, their encoding and admission limits), ``frames`` (the one size limit of a control
frame), ``sockets`` (both ends' ZeroMQ control sockets), ``liveness`` (heartbeat rules),
``tokens`` (job tokens for data connections) and ``clock`` (the injectable clock and NTP-style
offset estimation). It imports nothing heavy (msgspec, pyzmq and the standard library) and of
genie only ``genie.errors``.
"""
