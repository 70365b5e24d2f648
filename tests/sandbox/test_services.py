"""The sandbox's services keep their ports across restarts and stop completely: the running services listen on the
ports kept in the state's ports.json; those are chosen once and reused, and a kept port taken by another program
stops the start with the service, the port, the program and the fix; ``stop`` returns only when every process a
daemon had started has exited, and names those it had to kill.

Restarting the real services needs root, and the tests run as the analysis user; ``stop`` is therefore run here on
stand-in daemons of the test's own, in a state directory of its own, through the same services.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SERVICES_PY = Path(__file__).resolve().parents[2] / "sandbox" / "services.py"

# A daemon that, on SIGTERM, exits at once and leaves its child to exit on its own (as HTCondor's master can leave
# its daemons and their jobs); the child exits 1.5 s after its SIGTERM, or ignores it.
CHILD = """
import signal, sys, time
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1.5), sys.exit(0)))
print("ready", flush=True)
while True:
    time.sleep(60)
"""
DAEMON = """
import os, signal, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
print(child.pid, flush=True)
signal.pause()
"""


def services_module(state: Path, monkeypatch, scratch: Path | None = None):
    """services.py loaded afresh with its state directory at STATE, and a stand-in for the machine's list of reserved
    ports in SCRATCH (by default STATE)."""
    monkeypatch.setenv("HEPVINE_STATE_DIR", str(state))
    monkeypatch.syspath_prepend(str(SERVICES_PY.parent))  # its own modules beside it (catalogue.py)
    spec = importlib.util.spec_from_file_location("sandbox_services", SERVICES_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reserved = (scratch or state) / "ip_local_reserved_ports"  # the machine's own is the real services' alone
    reserved.write_text("\n")
    monkeypatch.setattr(module, "RESERVED_PORTS", reserved)
    return module


@pytest.mark.sandbox
def test_running_services_listen_on_the_kept_ports(services, monkeypatch, tmp_path):
    kept = json.loads(Path(services["ports_file"]).read_text())
    recorded = {
        "collector": int(services["condor"]["collector"].rsplit(":", 1)[1]),
        "catalog": services["catalog"]["port"],
        "origin": services["xrootd"]["origin"]["port"],
        **{rack: cache["port"] for rack, cache in services["xrootd"]["caches"].items()},
        "origin-gsi": services["xrootd"]["origin_gsi"]["port"],
        **{f"{rack}-gsi": cache["port"] for rack, cache in services["xrootd"]["caches_gsi"].items()},
        "origin-token": services["xrootd"]["origin_token"]["port"],
        "origin-b": services["xrootd"]["origin_b"]["port"],
        "rucio": services["rucio"]["port"],
        **{f"{rack}-token": cache["port"] for rack, cache in services["xrootd"]["caches_token"].items()},
    }
    assert recorded == kept
    assert services["xrootd"]["origin"]["url"] == f"root://127.0.0.1:{kept['origin']}"
    for name, port in kept.items():
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) == 0, f"{name} does not listen on its kept port {port}"
    module = services_module(Path(services["state_dir"]), monkeypatch, tmp_path)
    low, high = module.PORT_RANGE
    assert all(low <= port <= high for port in kept.values()), kept
    # ... and no outgoing connection can take one of them as its local port while they are down.
    machines = Path("/proc/sys/net/ipv4/ip_local_reserved_ports").read_text()
    assert set(kept.values()) <= module.reserved(machines), machines
    # Every XRootD server started is one that `stop` stops (it stops the daemons it names, by their pidfiles).
    started = {f"xrootd-{p.parent.name}" for p in (Path(services["state_dir"]) / "xrootd").glob("*/xrootd.pid")}
    assert started and started <= set(module.daemon_names()), started - set(module.daemon_names())
    assert services["checkout"] == str(SERVICES_PY.parents[1])  # started for this checkout


@pytest.mark.parametrize("started_from, restarted", [("this", False), ("/elsewhere/hepvine", True)])
def test_services_of_another_checkout_are_restarted(tmp_path, monkeypatch, capsys, started_from, restarted):
    """Running services are kept only if they were started for this checkout: HTCondor's jobs see the mounts of the
    session that started the pool, so workers of another checkout's services cannot import this one's workflow."""
    module = services_module(tmp_path, monkeypatch)
    checkout = module.CHECKOUT if started_from == "this" else started_from
    module.SERVICES_JSON.write_text(json.dumps({"checkout": checkout}))
    calls = []
    monkeypatch.setattr(module, "running", lambda: {"condor_master": True})
    monkeypatch.setattr(module, "stop", lambda quiet=False: calls.append("stop"))
    monkeypatch.setattr(module, "start_all", lambda: calls.append("start"))
    monkeypatch.chdir(tmp_path)
    module.start()
    err = capsys.readouterr().err
    if restarted:
        assert calls == ["stop", "start"] and f"running for the checkout {checkout}" in err, err
    else:
        assert calls == [] and "already running" in err, err


def test_ports_are_chosen_once_and_kept(tmp_path, monkeypatch):
    module = services_module(tmp_path, monkeypatch)
    ports = module.kept_ports()
    assert list(ports) == list(module.PORT_NAMES) and len(set(ports.values())) == len(ports)
    assert json.loads((tmp_path / "ports.json").read_text()) == ports
    assert module.kept_ports() == ports
    # A service that ports.json does not list yet (a rack added) gets a new port; the others keep theirs.
    del ports["rack-b"]
    (tmp_path / "ports.json").write_text(json.dumps(ports))
    again = module.kept_ports()
    assert {k: v for k, v in again.items() if k != "rack-b"} == ports and again["rack-b"] not in ports.values()


def test_kept_ports_are_added_to_the_reserved_ports(tmp_path, monkeypatch, capsys):
    """The kept ports join the machine's reserved ports, which the kernel never gives an outgoing connection as its
    local port; those already listed (singly or in a range) stay as they are. Where the list cannot be written, the
    start goes on and says so."""
    module = services_module(tmp_path, monkeypatch)
    module.RESERVED_PORTS.write_text("80,20000-20001\n")
    ports = module.kept_ports()
    listed = module.RESERVED_PORTS.read_text()
    assert module.reserved(listed) == {80, 20000, 20001, *ports.values()}, listed
    module.kept_ports()
    assert module.RESERVED_PORTS.read_text() == listed  # nothing added twice
    assert module.reserved(" 7, 9-11 \n") == {7, 9, 10, 11} and module.reserved("\n") == set()
    monkeypatch.setattr(module, "RESERVED_PORTS", tmp_path / "absent" / "ip_local_reserved_ports")
    assert module.kept_ports() == ports
    assert "the ports are not reserved from outgoing connections" in capsys.readouterr().err


def test_a_taken_port_stops_the_start_with_the_fix(tmp_path, monkeypatch):
    module = services_module(tmp_path, monkeypatch)
    ports = module.kept_ports()
    with socket.socket() as holder:
        # A port this process holds, kept for the catalog (the one picked may have been taken meanwhile by another
        # test's connection: binding it here failed once in CI).
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        ports["catalog"] = holder.getsockname()[1]
        (tmp_path / "ports.json").write_text(json.dumps(ports))
        with pytest.raises(SystemExit) as stopped:
            module.kept_ports()
    message = str(stopped.value)
    assert (
        f"port {ports['catalog']}, kept for catalog in {tmp_path / 'ports.json'}, is taken by pid {os.getpid()}"
        in message
    ), message
    assert "delete ports.json to pick new ports" in message
    (tmp_path / "ports.json").write_text("[1, 2]")
    with pytest.raises(SystemExit, match="ports.json: not a JSON object of port numbers; delete it"):
        module.kept_ports()


def test_a_kept_port_that_no_process_holds_is_waited_for(tmp_path, monkeypatch, capsys):
    """A port left in TIME_WAIT by a closed connection (no process holds it) is free again within a minute: the
    start waits for it, then goes on; past the wait it stops with the fix, as for a held port."""
    module = services_module(tmp_path, monkeypatch)
    ports = module.kept_ports()
    closing = {ports["rack-b"]: 3}  # port -> checks that still find it taken
    monkeypatch.setattr(module, "port_holder", lambda port: None)
    monkeypatch.setattr(module.time, "sleep", lambda s: None)

    def port_free(port):
        closing[port] = closing.get(port, 0) - 1
        return closing[port] < 0

    monkeypatch.setattr(module, "port_free", port_free)
    assert module.kept_ports() == ports
    assert f"port(s) {ports['rack-b']} still closing; waiting up to {module.PORT_WAIT_S} s" in capsys.readouterr().err
    monkeypatch.setattr(module, "PORT_WAIT_S", 0)
    closing[ports["rack-b"]] = 3
    with pytest.raises(SystemExit, match=f"port {ports['rack-b']}, kept for rack-b .* is taken by another program"):
        module.kept_ports()


def start_daemon(module, child_mode: str) -> tuple[subprocess.Popen, int]:
    """A stand-in daemon registered under the catalog server's pidfile, and the pid of its child."""
    daemon = subprocess.Popen([sys.executable, "-c", DAEMON, CHILD, child_mode], stdout=subprocess.PIPE, text=True)
    child = int(daemon.stdout.readline())
    module.PIDS.mkdir(parents=True, exist_ok=True)
    module.pidfile("catalog_server").write_text(f"{daemon.pid}\n")
    return daemon, child


def test_stop_returns_when_what_a_daemon_started_has_exited(tmp_path, monkeypatch, capsys):
    module = services_module(tmp_path, monkeypatch)
    daemon, child = start_daemon(module, "slow")
    began = time.monotonic()
    module.stop()
    assert not module.pid_alive(child) and time.monotonic() - began >= 1.4  # it waited for the child
    assert daemon.wait(5) == 0 and not module.pidfile("catalog_server").exists()
    assert "services: stopped (2 processes exited in" in capsys.readouterr().err


def test_stop_kills_what_outlives_the_wait_and_names_it(tmp_path, monkeypatch, capsys):
    module = services_module(tmp_path, monkeypatch)
    monkeypatch.setattr(module, "STOP_WAIT_S", 2)
    daemon, child = start_daemon(module, "ignore")
    module.stop()
    err = capsys.readouterr().err
    assert not module.pid_alive(child)
    assert f"still running 2 s after the stop, killed now: pid {child} ({sys.executable} -c" in err, err
    daemon.wait(5)
