"""The run's end waits for no scheduler timer: the re-evaluation timer that Snakemake's own scheduler starts each
round (with --max-jobs-per-timespan) is cancelled by the executor's shutdown (``scheduler.release_scheduler_timers``);
a timer of another scheduler, or of anything else, is left alone."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from snakemake.scheduling.job_scheduler import JobScheduler
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor

from snakemake_executor_plugin_taskvine import Executor
from snakemake_executor_plugin_taskvine.scheduler import release_scheduler_timers


def reevaluation(scheduler) -> threading.Thread:
    """The timer Snakemake's own code starts for SCHEDULER (a stand-in holding only its semaphore)."""
    before = set(threading.enumerate())
    JobScheduler._schedule_reevalutation(scheduler, 60)
    (started,) = set(threading.enumerate()) - before
    return started


def test_the_runs_scheduler_timer_is_cancelled_and_no_other():
    ours, theirs = (SimpleNamespace(_open_jobs=threading.Semaphore(0)) for _ in range(2))
    mine, other_scheduler = reevaluation(ours), reevaluation(theirs)
    other = threading.Timer(60, lambda: None)
    other.start()
    try:
        assert release_scheduler_timers(ours) == 1
        mine.join(timeout=10)
        assert not mine.is_alive()
        assert not ours._open_jobs.acquire(blocking=False)  # cancelled, not fired
        assert other_scheduler.is_alive() and other.is_alive()
        assert release_scheduler_timers(None) == 0
    finally:
        other.cancel()
        release_scheduler_timers(theirs)
    assert release_scheduler_timers(ours) == 0


def test_the_executors_shutdown_cancels_them(monkeypatch):
    scheduler = SimpleNamespace(_open_jobs=threading.Semaphore(0))
    timer = reevaluation(scheduler)
    executor = Executor.__new__(Executor)  # what shutdown uses of it: the workflow's scheduler
    executor.workflow = SimpleNamespace(scheduler=scheduler)
    monkeypatch.setattr(RemoteExecutor, "shutdown", lambda self: None)
    monkeypatch.setattr(Executor, "stop_workers", lambda self, keep=False: None)
    monkeypatch.setattr(Executor, "keeping", lambda self: False)
    try:
        executor.shutdown()
        timer.join(timeout=10)
        assert not timer.is_alive()
    finally:
        timer.cancel()
