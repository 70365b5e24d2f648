"""A worker killed in the middle of a job: TaskVine dispatches the task again, the workflow completes, and every
output is whole and written once (without a shared filesystem, outputs only come back from a finished task)."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

pytestmark = pytest.mark.sandbox

from snakemake_runs import slow_snakefile

SLOW = slow_snakefile("echo first-half > {output}; sleep 8; echo second-half >> {output}")


def workers_under(directory) -> list[psutil.Process]:
    """The vine_worker processes that the run's factory started (the factory runs in DIRECTORY)."""
    found = []
    for proc in psutil.process_iter(["name"]):
        try:
            if proc.info["name"] == "vine_worker" and any(
                parent.cwd().startswith(str(directory)) for parent in proc.parents()
            ):
                found.append(proc)
        except (psutil.Error, OSError):  # gone, a zombie, or not ours
            continue
    return found


def busy(worker: psutil.Process) -> bool:
    try:
        return any(child.name() == "sleep" for child in worker.children(recursive=True))
    except psutil.NoSuchProcess:
        return False


def test_killed_worker_job_is_redispatched(workflow):
    wf = workflow(SLOW)
    run = wf.popen("--shared-fs-usage", "none", "--taskvine-min-workers", "2", "--taskvine-max-workers", "2",
                   "--taskvine-worker-cores", "2", "--taskvine-worker-memory-mb", "1500",
                   "--taskvine-worker-disk-mb", "2000", "--default-resources", "mem_mb=100", "disk_mb=50")
    try:
        # Wait until a worker is running a job's command (a child that is not its own transfer server), then kill
        # that worker outright.
        victim, orphans = None, []
        deadline = time.monotonic() + 120
        while victim is None and time.monotonic() < deadline and run.poll() is None:
            victim = next((w for w in workers_under(wf.root / ".snakemake" / "taskvine") if busy(w)), None)
            time.sleep(0.5)
        assert victim is not None, "no worker started a job within 120 s"
        orphans = victim.children(recursive=True)
        os.kill(victim.pid, signal.SIGKILL)
        output, _ = run.communicate(timeout=300)
    finally:
        # What the killed worker left behind (its transfer server, its job's processes) is ours to end.
        for proc in orphans:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        if run.poll() is None:
            run.send_signal(signal.SIGINT)
            run.wait(60)
    assert run.returncode == 0, output[-4000:]
    for i in range(4):
        assert (wf.root / "out" / f"{i}.txt").read_text() == "first-half\nsecond-half\n"
    # The run really lost a worker: TaskVine's log shows the disconnection.
    transactions = next((wf.root / ".snakemake" / "taskvine").glob("*/manager/*/vine-logs/transactions"))
    assert "DISCONNECTION" in transactions.read_text()
