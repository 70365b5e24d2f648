"""A run's workers end on their own when its manager stops (issue 36), a busy one too: the plugin now stops its
manager first (cancelling what is left and telling the workers to exit), then ends the factories and removes their
jobs, so that a worker job ends by itself instead of being killed by HTCondor. This checks what that order relies
on, with workers the plugin did not start (by hand): within seconds of the dispatcher's stop none is left. It passes
with the manager's own goodbye too (cctools lets its workers go when the manager is deleted): the explicit "exit"
(``Manager.release_workers``) makes it not depend on when the manager object goes. Real manager, real workers, on
loopback."""

from __future__ import annotations

import time

import pytest
from test_idle_workers import results_within

from snakemake_executor_plugin_taskvine import taskvine
from snakemake_executor_plugin_taskvine.dispatcher import Dispatcher

pytestmark = pytest.mark.sandbox

WORKERS = 3
EXIT_WITHIN_S = 15


def test_workers_end_by_themselves_when_the_manager_stops(tmp_path):
    private = taskvine.private_directory()
    password = taskvine.write_password_file(private)
    dispatcher = Dispatcher(
        dict(
            port=0,
            name=None,
            password_file=password,
            ssl=False,
            run_info_dir=tmp_path / "manager",
            scheduler="files",
            library=False,
            secrets_dir=private,
            environment=None,
            credential_files={},
        ),
        prefer_wait_s=0,
    )
    workers = []
    try:
        port = dispatcher.start()
        workers = [
            taskvine.Worker(
                manager_host="127.0.0.1",
                manager_port=port,
                workspace=tmp_path / f"worker-{i}",
                password_file=password,
                memory_mb=500,
                disk_mb=500,
            )
            for i in range(WORKERS)
        ]
        tags = {f"quick-{i}" for i in range(WORKERS)}
        for tag in tags:
            dispatcher.submit(taskvine.TaskSpec(command="true", tag=tag, cores=1, memory_mb=10, disk_mb=10))
        assert results_within(dispatcher, tags, 60) == tags, dispatcher.error  # every worker connected
        dispatcher.submit(taskvine.TaskSpec(command="sleep 60", tag="busy", cores=1, memory_mb=10, disk_mb=10))
        time.sleep(3)  # on a worker by now
        dispatcher.stop()
        deadline = time.monotonic() + EXIT_WITHIN_S
        while any(w.proc.poll() is None for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        running = [w.proc.pid for w in workers if w.proc.poll() is None]
        assert not running, f"workers still running {EXIT_WITHIN_S} s after the manager stopped: {running}"
    finally:
        taskvine.stop_all(workers)
        dispatcher.stop()
        taskvine.remove_private_directory(private)
