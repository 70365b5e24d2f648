"""A worker killed in the middle of a job: TaskVine dispatches the task again, the workflow completes, and every
output is whole and written once (without a shared filesystem, outputs only come back from a finished task).
A job whose worker is lost on every try is dispatched 1 + --taskvine-retries times, then fails with an error that
names the rule and what to do, and leaves no output behind."""

from __future__ import annotations

import os
import signal
import time

import pytest
from snakemake_runs import busy, kill_all, slow_snakefile, workers_of

pytestmark = pytest.mark.sandbox

# The worker is killed within a poll (0.5 s) of its first job's sleep starting: 4 s leave room for that.
SLOW = slow_snakefile("echo first-half > {output}; sleep 4; echo second-half >> {output}")


def test_killed_worker_job_is_redispatched(workflow):
    wf = workflow(SLOW)
    run = wf.popen(
        "--shared-fs-usage",
        "none",
        "--taskvine-min-workers",
        "2",
        "--taskvine-max-workers",
        "2",
        "--taskvine-worker-cores",
        "2",
        "--taskvine-worker-memory-mb",
        "1500",
        "--taskvine-worker-disk-mb",
        "2000",
        "--default-resources",
        "mem_mb=100",
        "disk_mb=50",
    )
    try:
        # Wait until a worker is running a job's command (a child that is not its own transfer server), then kill
        # that worker outright.
        victim, orphans = None, []
        deadline = time.monotonic() + 120
        while victim is None and time.monotonic() < deadline and run.poll() is None:
            victim = next((w for w in workers_of(run.pid) if busy(w)), None)
            time.sleep(0.5)
        assert victim is not None, "no worker started a job within 120 s"
        orphans = victim.children(recursive=True)
        os.kill(victim.pid, signal.SIGKILL)
        output, _ = run.communicate(timeout=300)
    finally:
        # What the killed worker left behind (its transfer server, its job's processes) is ours to end.
        kill_all(orphans)
        if run.poll() is None:
            run.send_signal(signal.SIGINT)
            run.wait(60)
    assert run.returncode == 0, output[-4000:]
    for i in range(4):
        assert (wf.root / "out" / f"{i}.txt").read_text() == "first-half\nsecond-half\n"
    # The run really lost a worker: TaskVine's log shows the disconnection.
    transactions = next((wf.root / ".snakemake" / "taskvine").glob("*/manager/*/vine-logs/transactions"))
    assert "DISCONNECTION" in transactions.read_text()


@pytest.mark.chaos
def test_job_losing_its_worker_more_than_retries_times_fails(workflow):
    wf = workflow(slow_snakefile("echo first-half > {output}; sleep 60; echo second-half >> {output}", n=1))
    retries = 1
    run = wf.popen(
        "--shared-fs-usage",
        "none",
        "--taskvine-retries",
        str(retries),
        "--taskvine-min-workers",
        "1",
        "--taskvine-max-workers",
        "1",
        "--taskvine-worker-cores",
        "1",
        "--taskvine-worker-memory-mb",
        "1000",
        "--taskvine-worker-disk-mb",
        "2000",
        "--default-resources",
        "mem_mb=100",
        "disk_mb=50",
    )
    killed = []
    try:
        # Each time a (new) worker runs the job, kill it and what it started; the factory replaces the worker.
        # After 1 + retries losses the job must fail at once (a whole run of it takes 60 s).
        deadline = time.monotonic() + 240
        while run.poll() is None and time.monotonic() < deadline and len(killed) <= retries:
            victim = next((w for w in workers_of(run.pid) if w.pid not in killed and busy(w)), None)
            if victim is None:
                time.sleep(0.5)
                continue
            killed.append(victim.pid)
            kill_all([victim, *victim.children(recursive=True)])
        lost_all = time.monotonic()
        output, _ = run.communicate(timeout=120)
        gave_up_s = time.monotonic() - lost_all
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGINT)
            run.wait(60)
    assert run.returncode != 0, output[-4000:]
    assert len(killed) == retries + 1, (killed, output[-4000:])
    assert (
        "of rule slow failed" in output
        and f"its worker was lost {retries + 1} times" in output
        and "raise --taskvine-retries" in output
    ), output[-4000:]
    assert gave_up_s < 50, f"the run went on for {gave_up_s:.0f} s after the last lost worker"
    assert not (wf.root / "out" / "0.txt").exists()
