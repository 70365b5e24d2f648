"""A run's workers end on their own when its manager ends (issue 36), a busy one too: the plugin stops what it
provisioned (factories ended, their HTCondor jobs removed), then its manager, which releases every worker still
connected (``taskvine.Manager.close``: told to exit, a worker ends by itself, a factory's worker too, which would
otherwise try to reconnect), however long HTCondor takes to remove its job (with 1,000 worker jobs on this machine,
minutes). Checked with workers the plugin did not start (by hand), so that nothing but the manager's end can stop
them: through the dispatcher as a run ends, and with a manager in this process closed while the process lives on (as
the many-workers bench does). Real manager, real workers, on loopback."""

from __future__ import annotations

import time

import pytest
from test_idle_workers import local_workers, plain_run, results_within

from snakemake_executor_plugin_taskvine import taskvine

pytestmark = pytest.mark.sandbox

WORKERS = 3
EXIT_WITHIN_S = 15


def exited_within(workers: list[taskvine.Worker], timeout_s: float) -> list[int]:
    """The pids of WORKERS still running after TIMEOUT_S (returns as soon as none is)."""
    deadline = time.monotonic() + timeout_s
    while any(w.proc.poll() is None for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [w.proc.pid for w in workers if w.proc.poll() is None]


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
