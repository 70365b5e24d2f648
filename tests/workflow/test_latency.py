"""The processor bench's delay line (benchmarks/latency.py) holds what a client sends for its delay, once per round
trip: a request waits the delay, and requests sent together wait it together (a line, not a queue); the bytes arrive
whole and in order. Checked with a real TCP echo server on loopback and a delay far above loopback's own."""

from __future__ import annotations

import importlib.util
import socket
import threading
import time
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
DELAY_S = 0.2


def delay_line_module():
    spec = importlib.util.spec_from_file_location("latency", CHECKOUT / "benchmarks" / "latency.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)


@pytest.fixture
def echo_port():
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def exchange(conn: socket.socket, data: bytes) -> tuple[bytes, float]:
    started = time.monotonic()
    conn.sendall(data)
    got = b""
    while len(got) < len(data):
        got += conn.recv(1 << 20)
    return got, time.monotonic() - started


def test_each_round_trip_waits_the_delay_and_requests_sent_together_wait_it_once(echo_port):
    with delay_line_module().DelayLine("127.0.0.1", echo_port, DELAY_S) as port:
        with socket.create_connection(("127.0.0.1", port)) as conn:
            times = []
            for i in range(3):
                got, took = exchange(conn, f"request {i}".encode())
                assert got == f"request {i}".encode()
                times.append(took)
            assert min(times) >= DELAY_S, f"round trips of {times} s through a line of {DELAY_S} s"
            burst = b"".join(f"request {i};".encode() for i in range(10)) + bytes(range(256)) * 4000
            got, took = exchange(conn, burst)
            assert got == burst
            assert DELAY_S <= took < 5 * DELAY_S, f"10 requests and 1 MB sent at once took {took} s"
