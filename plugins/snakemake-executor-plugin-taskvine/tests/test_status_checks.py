"""The executor's status check (Executor.check_active_jobs), pure logic with a fake dispatcher: each result reaches
the job it belongs to once; a result of a job the check was not handed (submitted while it ran) waits for the next
check; the checks are spaced out as the active jobs grow (Snakemake hands every active job to every check)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from snakemake_executor_plugin_taskvine import STATUS_POLL_S, Executor
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
