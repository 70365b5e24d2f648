"""What the executor does to Snakemake's own scheduler when the run ends: its pending re-evaluations are cancelled.

With ``--max-jobs-per-timespan`` (the profiles' 1000/1s) each of Snakemake's scheduling rounds starts a non-daemon
``threading.Timer`` of the timespan that wakes the scheduler again. Snakemake shuts the executor down in its last
round and waits for nothing after, but the interpreter's exit waits for that thread: up to a second after the run
(0.75 s of a 10 s run, measured). Cancelled, the command ends when its work does.
"""

from __future__ import annotations

import threading

SCHEDULER_MODULE = "snakemake.scheduling.job_scheduler"


def release_scheduler_timers(scheduler) -> int:
    """Cancel the pending re-evaluation timers of SCHEDULER (the run's ``JobScheduler``; None: nothing); how many.
    Only timers started by Snakemake's scheduler module for that scheduler are touched (its callback holds it), so
    another workflow's in the same process keeps its own."""
    if scheduler is None:
        return 0
    pending = [
        thread
        for thread in threading.enumerate()
        if isinstance(thread, threading.Timer)
        and getattr(thread.function, "__module__", None) == SCHEDULER_MODULE
        and any(cell.cell_contents is scheduler for cell in getattr(thread.function, "__closure__", None) or ())
    ]
    for timer in pending:
        timer.cancel()
    return len(pending)
