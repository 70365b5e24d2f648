"""XRootD servers a test runs itself, as the analysis user under its tmp_path, so that it may kill and restart them
(the sandbox's shared servers belong to root or the xrootd user, and to everyone else's tests): the chaos tests'
origin and caches (tests/chaos/chaos_stack.py), a storage element of a Rucio test's own (tests/sandbox/test_rucio.py).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_until(what: str, ready, timeout: float, poll: float = 0.5) -> float:
    """Wait until READY() is true; seconds waited. Fails the test naming WHAT after TIMEOUT seconds."""
    start = time.monotonic()
    while not ready():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(poll)
    return time.monotonic() - start


class Server:
    """One xrootd daemon in the foreground (a child of the test, stopped by its pid) with CONFIG on PORT."""

    def __init__(self, name: str, port: int, config: str, base: Path):
        self.name, self.port, self.base = name, port, base
        self.cfg = base / "xrootd.cfg"
        base.mkdir(parents=True, exist_ok=True)
        self.cfg.write_text(config)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["xrootd", "-n", self.name, "-c", str(self.cfg), "-l", str(self.base / "log")],
            cwd=self.base,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(
            f"xrootd {self.name} listening on {self.port} (log: {self.base / self.name})",
            lambda: port_open(self.port) or self.proc.poll() is not None,
            timeout=30,
        )
        assert self.proc.poll() is None, f"xrootd {self.name} exited at start; see its log under {self.base}"

    def stop(self) -> None:
        """Kill it outright (as a crash would) and wait for the port to close."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        wait_until(f"port {self.port} of {self.name} closed", lambda: not port_open(self.port), timeout=30)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def origin_config(port: int, data: Path, admin: Path) -> str:
    """An origin exporting /store from DATA on PORT, logging each open."""
    return f"""all.export /store
oss.localroot {data}
xrd.port {port}
all.adminpath {admin}
all.pidpath {admin}
xrd.allow host localhost
ofs.trace open
"""
