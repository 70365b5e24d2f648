"""A job's local input changed during the run (an analysis file edited while its campaign runs) on real TaskVine
workers: the tasks submitted after the change get its new contents, also from a worker that cached the old ones."""

from __future__ import annotations

import time

import pytest

from snakemake_executor_plugin_taskvine import taskvine

pytestmark = pytest.mark.sandbox


def run_task(manager: taskvine.Manager, spec: taskvine.TaskSpec, timeout_s: float = 120) -> str:
    """SPEC's output, once it has finished."""
    manager.submit(spec)
    result, deadline = None, time.monotonic() + timeout_s
    while result is None and time.monotonic() < deadline:
        result = manager.wait(1)
    assert result is not None and result.successful, result
    return result.output


def test_an_input_changed_during_the_run_reaches_the_tasks_after_it_from_a_worker_that_cached_it(tmp_path):
    analysis = tmp_path / "analysis.py"
    analysis.write_text("SELECTION = 'first'\n")
    password = taskvine.write_password_file(tmp_path / "secret")
    manager = taskvine.Manager(port=0, password_file=password, run_info_dir=tmp_path / "run-info")
    worker = taskvine.Worker(
        manager_host="127.0.0.1",
        manager_port=manager.port,
        workspace=tmp_path / "worker",
        password_file=password,
        cores=1,
        memory_mb=1000,
        disk_mb=1000,
    )
    try:
        look = taskvine.TaskSpec(command="cat analysis.py", cores=1, inputs=[(str(analysis), "analysis.py")])
        assert run_task(manager, look) == "SELECTION = 'first'\n"
        assert run_task(manager, look) == "SELECTION = 'first'\n"  # (from the worker's cache)
        time.sleep(0.01)
        analysis.write_text("SELECTION = 'edited'\n")
        assert run_task(manager, look) == "SELECTION = 'edited'\n"  # the one worker had cached the first
    finally:
        taskvine.stop_all([worker])
