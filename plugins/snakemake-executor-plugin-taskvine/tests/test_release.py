"""A run's workers end on their own when its manager ends (issue 36), a busy one too: the plugin stops what it
provisioned (factories ended, their HTCondor jobs removed) and its manager, which releases every worker still
connected (``taskvine.Manager.close``: told to exit, a worker ends by itself, a factory's worker too, which would
otherwise try to reconnect), however long HTCondor takes to remove its job (with 1,000 worker jobs on this machine,
minutes). Checked with workers the plugin did not start (by hand), so that nothing but the manager's end can stop
them: through the dispatcher as a run ends, and with a manager in this process closed while the process lives on (as
the many-workers bench does); a worker running the library (which no "exit" reaches: it is released when the manager
ends), one started by hand and one started by a factory, which its factory does not end. Real manager, real workers,
real factory, on loopback."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from test_idle_workers import local_workers, plain_run, results_within

from snakemake_executor_plugin_taskvine import taskvine

pytestmark = pytest.mark.sandbox

WORKERS = 3
EXIT_WITHIN_S = 15


def alive(pid: int) -> bool:
    """Whether PID runs (an ended process its parent has not reaped yet, a zombie, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def pids_running(pids: set[int], timeout_s: float) -> set[int]:
    """Those of PIDS still running after TIMEOUT_S (returns as soon as none is)."""
    deadline = time.monotonic() + timeout_s
    while (running := {p for p in pids if alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.2)
    return running


def exited_within(workers: list[taskvine.Worker], timeout_s: float) -> list[int]:
    """The pids of WORKERS still running after TIMEOUT_S (returns as soon as none is)."""
    return sorted(pids_running({w.proc.pid for w in workers}, timeout_s))


def test_workers_end_by_themselves_when_the_manager_stops(tmp_path):
    with plain_run(tmp_path / "manager") as (dispatcher, port, password, workers):
        workers += local_workers(port, password, tmp_path, WORKERS, "worker")
        tags = {f"quick-{i}" for i in range(WORKERS)}
        for tag in tags:
            dispatcher.submit(taskvine.TaskSpec(command="true", tag=tag, cores=1, memory_mb=10, disk_mb=10))
        assert results_within(dispatcher, tags, 60) == tags, dispatcher.error  # every worker connected
        dispatcher.submit(taskvine.TaskSpec(command="sleep 60", tag="busy", cores=1, memory_mb=10, disk_mb=10))
        time.sleep(3)  # on a worker by now
        dispatcher.stop()
        running = exited_within(workers, EXIT_WITHIN_S)
        assert not running, f"workers still running {EXIT_WITHIN_S} s after the manager stopped: {running}"


def test_a_closed_manager_releases_its_workers_while_its_process_lives_on(tmp_path):
    password = taskvine.write_password_file(tmp_path)
    manager = taskvine.Manager(port=0, password_file=password, run_info_dir=tmp_path / "manager")
    workers = local_workers(manager.port, password, tmp_path, WORKERS, "worker")
    try:
        deadline = time.monotonic() + 60
        while manager.workers_connected() < WORKERS and time.monotonic() < deadline:
            manager.wait(1)
        assert manager.workers_connected() == WORKERS
        busy = manager.submit(taskvine.TaskSpec(command="sleep 60", tag="busy", cores=1, memory_mb=10, disk_mb=10))
        while manager.is_waiting(busy) and time.monotonic() < deadline:
            manager.wait(1)
        assert not manager.is_waiting(busy), "the task never started"
        manager.close()
        running = exited_within(workers, EXIT_WITHIN_S)
        assert not running, f"workers still running {EXIT_WITHIN_S} s after the manager was closed: {running}"
    finally:
        taskvine.stop_all(workers)


def library_call_running(manager: taskvine.Manager, timeout_s: float = 120) -> None:
    """Submit a library call that sleeps for a minute, and wait until a worker runs it."""
    busy = manager.submit(taskvine.TaskSpec(command="sleep 60", tag="busy", function=True))
    deadline = time.monotonic() + timeout_s
    while manager.is_waiting(busy) and time.monotonic() < deadline:
        manager.wait(1)
    assert not manager.is_waiting(busy), "the library call never started"


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_closed_manager_releases_the_workers_running_its_library(tmp_path):
    password = taskvine.write_password_file(tmp_path)
    manager = taskvine.Manager(port=0, password_file=password, run_info_dir=tmp_path / "manager", library=True)
    port = manager.port
    workers = local_workers(port, password, tmp_path, 1, "worker")
    try:
        library_call_running(manager)
        manager.close()
        assert not port_open(port), "the closed manager still listens"
        running = exited_within(workers, EXIT_WITHIN_S)
        assert not running, f"a worker running the library still runs {EXIT_WITHIN_S} s after the close: {running}"
    finally:
        taskvine.stop_all(workers)


def test_a_factorys_worker_ends_when_its_manager_ends_and_the_factory_lives_on(tmp_path):
    password = taskvine.write_password_file(tmp_path)
    manager = taskvine.Manager(port=0, password_file=password, run_info_dir=tmp_path / "manager", library=True)
    factory = taskvine.Factory(
        batch_type="local",
        manager_host="127.0.0.1",
        manager_port=manager.port,
        scratch_dir=tmp_path / "factory",
        password_file=password,
        memory_mb=500,
        disk_mb=500,
    )
    try:
        library_call_running(manager)
        started = set(taskvine._descendants({factory.proc.pid}))  # its worker, the library, the call
        assert started, "the factory has started nothing"
        manager.close()
        running = pids_running(started, EXIT_WITHIN_S)
        assert not running, f"what the factory started still runs {EXIT_WITHIN_S} s after its manager ended: {running}"
        assert factory.proc.poll() is None, "the factory ended: nothing would have checked its workers"
    finally:
        factory.stop()
