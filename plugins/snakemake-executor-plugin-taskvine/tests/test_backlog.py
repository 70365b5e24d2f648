"""The plugin's own queue (dispatcher.Tasks): TaskVine holds at most max_tasks of the run's tasks (0: twice the
connected cores, at least MIN_TASKS); the rest wait in order and are handed over as tasks end; a cancelled job
never reaches TaskVine. Pure logic, with the fake manager of the straggler tests."""

from __future__ import annotations

from test_stragglers import FakeManager, Pipe, result

from snakemake_executor_plugin_taskvine.dispatcher import MIN_TASKS, Tasks
from snakemake_executor_plugin_taskvine.stragglers import Stragglers
from snakemake_executor_plugin_taskvine.taskvine import TaskResult, TaskSpec


def _tasks(max_tasks: int, cores: int = 0, n: int = 5):
    manager, pipe = FakeManager(cores), Pipe()
    tasks = Tasks(manager, Stragglers(factor=0, min_s=0), pipe, max_tasks)
    for i in range(n):
        tasks.submit(TaskSpec(f"job {i}", tag=f"t{i}", category="analyse"))
    return manager, pipe, tasks


def submitted(manager: FakeManager) -> list[str]:
    return [spec.tag for _, spec in manager.submitted]


def test_taskvine_holds_at_most_max_tasks_and_gets_the_rest_in_order_as_tasks_end():
    manager, pipe, tasks = _tasks(max_tasks=2)
    assert submitted(manager) == ["t0", "t1"] and [s.tag for s in tasks.backlog] == ["t2", "t3", "t4"]
    tasks.feed()  # nothing ended: nothing more
    assert submitted(manager) == ["t0", "t1"]
    tasks.finished(result(1, "t0"))
    tasks.feed()
    assert submitted(manager) == ["t0", "t1", "t2"]
    assert [m[1].tag for m in pipe.sent if m[0] == "result"] == ["t0"]


def test_a_job_cancelled_while_queued_never_reaches_taskvine_and_one_submitted_again_runs_once():
    manager, _, tasks = _tasks(max_tasks=1, n=3)
    tasks.cancel("t1")  # still queued: dropped, nothing to cancel in TaskVine
    assert manager.cancelled == []
    tasks.submit(TaskSpec("job 2 again", tag="t2", category="analyse"))  # Snakemake resubmits t2
    tasks.finished(result(1, "t0"))
    tasks.feed()
    tasks.finished(result(2, "t2"))
    tasks.feed()
    assert [(s.tag, s.command) for _, s in manager.submitted] == [("t0", "job 0"), ("t2", "job 2 again")]
    assert not tasks.backlog


def test_by_default_twice_the_connected_cores_at_least_min_tasks():
    manager, _, tasks = _tasks(max_tasks=0, cores=0, n=MIN_TASKS + 10)
    assert len(manager.submitted) == MIN_TASKS  # no worker yet
    manager.cores = MIN_TASKS  # workers with that many cores connect
    tasks.feed()
    assert len(manager.submitted) == MIN_TASKS + 10
    assert tasks.limit() == 2 * MIN_TASKS


def test_cancel_all_cancels_what_taskvine_holds_and_forgets_the_queue():
    manager, _, tasks = _tasks(max_tasks=2)
    tasks.cancel_all()
    assert manager.cancelled == [1, 2] and tasks.specs == {}
    tasks.feed()
    assert len(manager.submitted) == 2


def test_a_lost_tasks_result_frees_its_place():
    manager, _, tasks = _tasks(max_tasks=1, n=2)
    tasks.finished(
        TaskResult(
            task_id=1,
            tag="t0",
            successful=False,
            exit_code=None,
            result="lost",
            output="",
            hostname="",
            category="analyse",
            run_s=0.0,
        )
    )
    tasks.feed()
    assert submitted(manager) == ["t0", "t1"]


def test_the_request_pipe_holds_hundreds_of_jobs():
    """The manager process reads requests between its 1-s waits: the pipe must hold a second's worth of jobs."""
    import fcntl
    import multiprocessing
    from pathlib import Path

    from snakemake_executor_plugin_taskvine.dispatcher import widen

    receiving, sending = multiprocessing.Pipe(duplex=False)
    widen(sending)
    assert fcntl.fcntl(sending.fileno(), fcntl.F_GETPIPE_SZ) == int(Path("/proc/sys/fs/pipe-max-size").read_text())
