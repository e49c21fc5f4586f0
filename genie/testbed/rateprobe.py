"""A bounded TCP rate probe between two emulated hosts: one receiver, one sender, one number.

Run inside namespaces with ``ip netns exec NS python -m genie.testbed.rateprobe recv IP PORT``
and ``... send IP PORT BYTES [DEADLINE [wait-go]]``. The receiver prints ``ready`` once
listening, then one JSON line (bytes, seconds, first, last) timed from the first to the last
byte it got. Both ends stop after a byte count and a deadline, and only talk to
198.18.0.0/15 or loopback.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
import time

CHUNK = 256 * 1024
MAX_BYTES = 1 << 30
ALLOWED = (ipaddress.ip_network("198.18.0.0/15"), ipaddress.ip_network("127.0.0.0/8"))


def _check_addr(ip: str) -> None:
    if not any(ipaddress.ip_address(ip) in net for net in ALLOWED):
        raise SystemExit(f"rateprobe: {ip} is outside 198.18.0.0/15 and loopback")


def receive(ip: str, port: int, deadline_s: float = 30.0) -> dict[str, float]:
    """Accept one connection, read until EOF (or the deadline), return bytes and seconds."""
    _check_addr(ip)
    end = time.monotonic() + deadline_s
    with socket.create_server((ip, port), backlog=1) as srv:
        srv.settimeout(deadline_s)
        print("ready", flush=True)
        conn, _ = srv.accept()
        with conn:
            buf = bytearray(CHUNK)
            total = 0
            first = last = 0.0
            while time.monotonic() < end and total < MAX_BYTES:
                conn.settimeout(max(0.01, end - time.monotonic()))
                try:
                    n = conn.recv_into(buf)
                except TimeoutError:
                    break
                if n == 0:
                    break
                last = time.monotonic()
                if total == 0:
                    first = last
                total += n
    return {"bytes": total, "seconds": last - first, "first": first, "last": last}


def send(ip: str, port: int, nbytes: int, deadline_s: float = 30.0, wait_go: bool = False) -> int:
    """Connect and send ``nbytes`` (at most MAX_BYTES) before the deadline; return bytes sent.

    With ``wait_go`` it prints ``connected`` and waits for a line on stdin before sending, so
    several senders can start together.
    """
    _check_addr(ip)
    nbytes = min(nbytes, MAX_BYTES)
    payload = memoryview(bytes(CHUNK))
    sent = 0
    with socket.create_connection((ip, port), timeout=deadline_s) as s:
        if wait_go:
            print("connected", flush=True)
            sys.stdin.readline()
        end = time.monotonic() + deadline_s
        while sent < nbytes and time.monotonic() < end:
            s.settimeout(max(0.01, end - time.monotonic()))
            sent += s.send(payload[: min(CHUNK, nbytes - sent)])
    return sent


def main(argv: list[str]) -> int:
    """``recv IP PORT [DEADLINE]`` or ``send IP PORT BYTES [DEADLINE [wait-go]]``."""
    if len(argv) >= 3 and argv[0] == "recv":
        deadline = float(argv[3]) if len(argv) > 3 else 30.0
        print(json.dumps(receive(argv[1], int(argv[2]), deadline)), flush=True)
        return 0
    if len(argv) >= 4 and argv[0] == "send":
        deadline = float(argv[4]) if len(argv) > 4 else 30.0
        wait_go = len(argv) > 5 and argv[5] == "wait-go"
        print(send(argv[1], int(argv[2]), int(argv[3]), deadline, wait_go), flush=True)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
