"""Stragglers: a task that runs far longer than its rule's finished tasks gets a second copy; the first copy to succeed
wins, the other is cancelled, and the job ends once. Pure logic with a fake manager here; the real run is
test_straggler_gets_a_copy_that_wins (TaskVine workers on the sandbox)."""

from __future__ import annotations

import dataclasses
import time

import psutil
import pytest
from snakemake_runs import alive, kill_all

from snakemake_executor_plugin_taskvine.dispatcher import Tasks
from snakemake_executor_plugin_taskvine.stragglers import MIN_PEERS, Stragglers
from snakemake_executor_plugin_taskvine.taskvine import TaskResult, TaskSpec


class FakeManager:
    """What Tasks asks of the manager: submit, cancel, how long a task has been on a worker, and which credentials
    have expired (EXPIRED, set by a test)."""

    def __init__(self, cores: int = 0):
        self.submitted: list[tuple[int, TaskSpec]] = []
        self.cancelled: list[int] = []
        self.dispatched_at: dict[int, float] = {}
        self.cores = cores
        self.expired: list[str] = []

    def expired_credentials(self) -> list[str]:
        return list(self.expired)

    def cores_connected(self) -> int:
        return self.cores

    def submit(self, spec: TaskSpec) -> int:
        self.submitted.append((len(self.submitted) + 1, spec))
        return len(self.submitted)

    def cancel(self, task_id: int) -> None:
        self.cancelled.append(task_id)

    def hostname(self, task_id: int) -> str:
        return "w"

    def running_s(self, task_id: int, now: float) -> float | None:
        at = self.dispatched_at.get(task_id)
        return None if at is None else now - at


class Pipe:
    def __init__(self):
        self.sent = []

    def send(self, message):
        self.sent.append(message)


def result(task_id: int, tag: str, ok: bool = True, run_s: float = 10.0) -> TaskResult:
    return TaskResult(
        task_id=task_id,
        tag=tag,
        successful=ok,
        exit_code=0 if ok else 1,
        result="success",
        output="",
        hostname="w",
        category="analyse",
        run_s=run_s,
    )


def test_threshold_is_factor_times_the_median_once_enough_peers_finished():
    s = Stragglers(factor=3, min_s=5)
    for _ in range(MIN_PEERS - 1):
        s.finished("analyse", 10)
    assert s.threshold("analyse") is None  # too few peers to know what is normal
    s.finished("analyse", 40)
    assert s.threshold("analyse") == 30  # 3 x median(10, 10, 40)
    assert not s.is_straggler("analyse", 29) and s.is_straggler("analyse", 31)
    assert s.threshold("merge") is None  # peers are of the same rule only
    for _ in range(MIN_PEERS):
        s.finished("merge", 1)
    assert s.threshold("merge") == 5  # never less than min_s
    assert Stragglers(factor=0, min_s=0).threshold("analyse") is None  # off


def _tasks_with_a_straggler():
    manager, pipe = FakeManager(), Pipe()
    stragglers = Stragglers(factor=3, min_s=0)
    for _ in range(MIN_PEERS):
        stragglers.finished("analyse", 10)
    tasks = Tasks(manager, stragglers, pipe)
    tasks.submit(TaskSpec("sleep", tag="slow", category="analyse", preferred=("rack-a",)))
    tasks.submit(TaskSpec("true", tag="fine", category="analyse"))
    manager.dispatched_at = {1: 0.0, 2: 25.0}
    tasks.copy_stragglers(now=35.0)  # task 1 has run 35 s > 30 s; task 2 only 10 s
    return manager, pipe, tasks


def test_a_straggler_gets_one_copy_ahead_of_the_queue_anywhere():
    manager, pipe, tasks = _tasks_with_a_straggler()
    assert [(i, s.tag) for i, s in manager.submitted] == [(1, "slow"), (2, "fine"), (3, "slow")]
    copy = manager.submitted[2][1]
    assert copy.priority > 0 and copy.preferred == () and copy.command == "sleep"
    assert pipe.sent[0][0] == "note" and "slow" in pipe.sent[0][1]
    tasks.copy_stragglers(now=100.0)  # now "fine" too has run long enough for a copy
    assert [s.tag for _, s in manager.submitted] == ["slow", "fine", "slow", "fine"]  # one copy per task


def test_first_success_wins_and_the_other_copy_is_cancelled():
    manager, pipe, tasks = _tasks_with_a_straggler()
    tasks.finished(result(3, "slow", run_s=12))  # the copy wins
    assert manager.cancelled == [1]
    assert [m for m in pipe.sent if m[0] == "result"] == [("result", result(3, "slow", run_s=12))]
    tasks.finished(result(1, "slow"))  # the cancelled one, had it finished anyway: nothing more goes up
    assert len([m for m in pipe.sent if m[0] == "result"]) == 1


def test_a_failed_copy_waits_for_the_other_and_only_the_last_failure_goes_up():
    manager, pipe, tasks = _tasks_with_a_straggler()
    tasks.finished(result(1, "slow", ok=False))  # the straggler fails; its copy still runs
    assert not [m for m in pipe.sent if m[0] == "result"] and manager.cancelled == []
    tasks.finished(result(3, "slow", ok=False))
    assert [m[1].task_id for m in pipe.sent if m[0] == "result"] == [3]
    tasks.cancel("fine")
    assert manager.cancelled == [2] and tasks.specs == {}


def test_cancelling_a_job_cancels_both_copies():
    manager, _, tasks = _tasks_with_a_straggler()
    tasks.cancel("slow")
    assert sorted(manager.cancelled) == [1, 3]


def test_a_task_past_its_time_limit_is_cancelled_and_fails_unless_its_copy_runs_on():
    manager, pipe, tasks = _tasks_with_a_straggler()  # "slow" (task 1) has a copy (task 3) since t=35
    for tag in ("slow", "fine"):
        tasks.specs[tag] = dataclasses.replace(tasks.specs[tag], time_max_s=50)
    manager.dispatched_at[3] = 35.0
    tasks.check_running(now=60.0)  # task 1 ran 60 s > 50: cancelled; its copy (25 s) runs on; "fine" ran 35 s
    assert manager.cancelled == [1] and not [m for m in pipe.sent if m[0] == "result"]
    assert manager.submitted[-1][1].tag == "fine"  # ... but "fine" is a straggler (35 s > 30 s): copied as task 4
    manager.dispatched_at[4] = 60.0
    tasks.check_running(now=90.0)  # slow's copy ran 55 s: past the limit, and no other copy: the job fails
    failed = [m[1] for m in pipe.sent if m[0] == "result"]
    assert [(r.tag, r.result, r.task_id) for r in failed] == [("slow", "time limit", 3)]
    assert sorted(manager.cancelled) == [1, 2, 3]  # "fine" (65 s) too, but its copy (30 s) runs on
    assert list(tasks.specs) == ["fine"] and tasks.task_ids == {"fine": 4}


# The real thing: one job of a rule hangs on its first try; its copy, started once it has run 3x the median of the
# others (and at least 5 s), finishes the run; the hung one is cancelled (its process ends).
STRAGGLER = """
rule all:
    input: "total.txt"

rule part:
    output: "out/{{i}}.txt"
    shell:
        "if [ {{wildcards.i}} = 0 ] && mkdir {marker} 2>/dev/null; then echo $$ > {marker}/pid; "
        "sleep 600; echo slow > {{output}}; else sleep 2; echo copy-or-peer > {{output}}; fi"

rule total:
    input: expand("out/{{i}}.txt", i=range(6))
    output: "total.txt"
    shell: "cat {{input}} > {{output}}"
"""


@pytest.mark.sandbox
def test_straggler_gets_a_copy_that_wins(workflow, tmp_path):
    marker = tmp_path / "first-try-of-0"
    wf = workflow(STRAGGLER.format(marker=marker))
    done = wf.run(
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
        "disk_mb=10",
        "--taskvine-straggler-factor",
        "3",
        "--taskvine-straggler-min-s",
        "5",
        timeout=400,
    )  # the hung try sleeps 600 s: the run must finish without it
    pid = int((marker / "pid").read_text())
    try:
        assert done.returncode == 0, done.stderr[-4000:]
        assert "started a second copy" in done.stderr
        # Every part once, the straggler's from its copy; the downstream job read the copy's output.
        assert (wf.root / "total.txt").read_text() == "copy-or-peer\n" * 6
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.5)
        assert not _alive(pid), "the cancelled copy's process is still running"
    finally:
        if _alive(pid):  # ours to end: the hung try's shell and its sleep
            proc = psutil.Process(pid)
            kill_all([*proc.children(recursive=True), proc])


def _alive(pid: int) -> bool:
    try:
        return alive(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False
