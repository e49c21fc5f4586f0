"""The wire: what the controller and the agents say to each other, and nothing else.

A neutral package both sides import (the controller never imports ``agents``; ``agents`` never
imports the controller or the CLI): ``messages`` (the typed control messages, their encoding
and size limits), ``liveness`` (heartbeat rules), ``tokens`` (job tokens for data connections)
and ``clock`` (the injectable clock and NTP-style offset estimation). It imports nothing heavy:
msgspec and the standard library.
"""
