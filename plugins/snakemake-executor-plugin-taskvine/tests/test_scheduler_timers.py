"""The run's end waits for no scheduler timer: Snakemake's own re-evaluation timer (what each of its scheduling rounds
starts with --max-jobs-per-timespan) is cancelled by ``release_scheduler_timers``, which the executor's shutdown calls;
a timer of anything else is left alone."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from snakemake.scheduling.job_scheduler import JobScheduler

from snakemake_executor_plugin_taskvine import release_scheduler_timers


def test_snakemakes_reevaluation_timer_is_cancelled_and_no_other():
    scheduler = SimpleNamespace(_open_jobs=threading.Semaphore(0))
    before = set(threading.enumerate())
    JobScheduler._schedule_reevalutation(scheduler, 60)  # Snakemake's own code starts its timer
    (started,) = set(threading.enumerate()) - before
    other = threading.Timer(60, lambda: None)
    other.start()
    try:
        assert release_scheduler_timers() == 1
        started.join(timeout=10)
        assert not started.is_alive()
        assert not scheduler._open_jobs.acquire(blocking=False)  # cancelled, not fired
        assert other.is_alive()
    finally:
        other.cancel()
    assert release_scheduler_timers() == 0
