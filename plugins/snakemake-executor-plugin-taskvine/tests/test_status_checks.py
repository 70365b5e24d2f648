"""The executor's status check (Executor.check_active_jobs), pure logic with a fake dispatcher: each result reaches
the job it belongs to once; a result of a job the check was not handed (submitted while it ran) waits for the next
check; the checks are spaced out as the active jobs grow (Snakemake hands every active job to every check), from the
first (made before the executor is ready); an
HTCondor job of a worker for larger jobs that waits long for a slot is said once (fake jobs)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from snakemake_executor_plugin_taskvine import SLOT_WAIT_S, STATUS_POLL_S, Executor
from snakemake_executor_plugin_taskvine.taskvine import TaskResult


class FakeDispatcher:
    error = None
    stopped = None

    def __init__(self):
        self.results: dict[str, TaskResult] = {}

    def collect(self):
        pass

    def take_notes(self):
        return []

    def take_results(self):
        results, self.results = self.results, {}
        return results

    def keep_results(self, results):
        self.results.update(results)


def done(tag: str) -> TaskResult:
    return TaskResult(task_id=1, tag=tag, successful=True, exit_code=0, result="success", output="", hostname="w")


def executor() -> tuple[Executor, list[str]]:
    ex = object.__new__(Executor)  # no __post_init__: no TaskVine, no workers
    ex.dispatcher, succeeded = FakeDispatcher(), []
    ex.report_job_success = lambda info: succeeded.append(info.external_jobid)
    ex.waiting_for_slot, ex.next_slot_check = {}, 0.0
    ex.provisioned, ex.factories_ended = [], []
    return ex, succeeded


def check(ex: Executor, tags: list[str]) -> list[str]:
    async def run():
        return [i.external_jobid async for i in ex.check_active_jobs([SimpleNamespace(external_jobid=t) for t in tags])]

    return asyncio.run(run())


def test_each_result_reaches_its_job_once_and_one_of_a_job_not_yet_handed_over_waits():
    ex, succeeded = executor()
    ex.dispatcher.results = {"a": done("a"), "late": done("late")}
    assert check(ex, ["a", "b"]) == ["b"] and succeeded == ["a"]
    assert set(ex.dispatcher.results) == {"late"}  # kept for the next check
    assert check(ex, ["b", "late"]) == ["b"] and succeeded == ["a", "late"]
    assert check(ex, ["b"]) == ["b"] and succeeded == ["a", "late"]


def test_checks_are_spaced_out_as_active_jobs_grow():
    ex, _ = executor()
    check(ex, [f"t{i}" for i in range(10)])
    assert ex.next_seconds_between_status_checks == STATUS_POLL_S
    check(ex, [f"t{i}" for i in range(30_000)])
    assert 1 <= ex.next_seconds_between_status_checks <= 2


def test_the_first_check_before_the_executor_is_ready_sets_the_interval_of_the_next():
    """Snakemake's status thread makes its first check (nothing active) before __post_init__; the wait after it must
    be the executor's poll, not Snakemake's seconds_between_status_checks (10 s), which had every job of a short run
    seen up to 10 s after it ended (the physicist's loop: 2-3 s of a 12 s command)."""
    ex = object.__new__(Executor)  # no dispatcher yet
    ex._next_seconds_between_status_checks = None  # as Snakemake's RemoteExecutor.__init__ leaves it
    ex.workflow = SimpleNamespace(remote_execution_settings=SimpleNamespace(seconds_between_status_checks=10))
    assert check(ex, []) == []
    assert ex.next_seconds_between_status_checks == STATUS_POLL_S


class FakeCondorWorker:
    def __init__(self, job_id: str, idle: bool, submitted: float):
        self.job_id, self.size, self.still_idle, self.asked = job_id, (2, 3000, 8192), idle, 0
        self.submitted = submitted

    def idle(self) -> bool:
        self.asked += 1
        return self.still_idle


def test_a_worker_job_that_waits_long_for_a_slot_is_said_once():
    ex, _ = executor()
    said = []
    ex.logger = SimpleNamespace(warning=said.append)
    long_ago = time.monotonic() - SLOT_WAIT_S - 1
    waiting, started = FakeCondorWorker("7.0", True, long_ago), FakeCondorWorker("8.0", False, long_ago)
    recent = FakeCondorWorker("9.0", True, time.monotonic())
    ex.waiting_for_slot = {waiting: "big", started: "big", recent: "big"}
    check(ex, ["t"])
    assert len(said) == 1 and "HTCondor job 7.0 of a worker of 2 cores, 3000 MB" in said[0] and "rule big" in said[0]
    assert "--taskvine-max-workers" in said[0] and recent.asked == 0  # not asked before its time
    assert list(ex.waiting_for_slot) == [recent]
    check(ex, ["t"])  # within a minute: condor_q is not asked again
    assert waiting.asked == 1 and len(said) == 1
