"""The processor bench's delay line (benchmarks/latency.py) holds what a client sends for its delay, once per round
trip: a request waits the delay, and requests sent together wait it together (a line, not a queue); the bytes arrive
whole and in order; and it ends with the process that started it. Checked with a real TCP echo server on loopback and
a delay far above loopback's own."""

from __future__ import annotations

import importlib.util
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
DELAY_S = 0.2
LATENCY = CHECKOUT / "benchmarks" / "latency.py"


def delay_line_module():
    spec = importlib.util.spec_from_file_location("latency", LATENCY)
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


def test_the_line_ends_with_the_process_that_started_it_even_killed(echo_port):
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import importlib.util, sys, time; "
            f"spec = importlib.util.spec_from_file_location('latency', {str(LATENCY)!r}); "
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
            f"line = m.DelayLine('127.0.0.1', {echo_port}, 0.01); line.__enter__(); "
            "print(line._process.pid, flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = psutil.Process(int(starter.stdout.readline()))
        starter.send_signal(signal.SIGKILL)
        starter.wait()
        try:
            line.wait(10)
        except psutil.TimeoutExpired:
            line.kill()
            pytest.fail("the delay line outlived the process that started it by 10 s")
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()
        starter.stdout.close()
