"""Soft preferences (pure logic with a stand-in for the manager; the real case is in test_worker_groups): a task's
wait counts only while some worker sits idle, and one task moves per idle worker."""

from snakemake_executor_plugin_taskvine.dispatcher import Preferring, drop_stale_preferences
from snakemake_executor_plugin_taskvine.taskvine import TaskSpec


class StandIn:
    """What drop_stale_preferences asks of the manager: idle workers, queued tasks, cancel and submit."""

    def __init__(self, idle: int):
        self.idle = idle
        self.queued: set[int] = set()
        self.submitted: list[TaskSpec] = []

    def workers_idle(self) -> int:
        return self.idle

    def is_waiting(self, task_id: int) -> bool:
        return task_id in self.queued

    def cancel(self, task_id: int) -> None:
        self.queued.discard(task_id)

    def submit(self, spec: TaskSpec) -> int:
        self.submitted.append(spec)
        task_id = 100 + len(self.submitted)
        self.queued.add(task_id)
        return task_id


def queue(manager: StandIn, n: int) -> tuple[dict, dict]:
    task_ids = {f"t{i}": i for i in range(n)}
    manager.queued |= set(task_ids.values())
    return task_ids, {tag: Preferring(TaskSpec("true", tag=tag, preferred=("rack-b",)), looked=0.0) for tag in task_ids}


def test_time_with_every_worker_busy_does_not_count():
    manager = StandIn(idle=0)
    task_ids, preferring = queue(manager, 2)
    for now in range(1, 101):  # 100 s queued, nobody idle
        drop_stale_preferences(manager, task_ids, preferring, wait_s=10, now=now)
    assert set(preferring) == {"t0", "t1"} and not manager.submitted
    manager.idle = 1
    for now in range(101, 110):
        drop_stale_preferences(manager, task_ids, preferring, wait_s=10, now=now)
    assert not manager.submitted
    drop_stale_preferences(manager, task_ids, preferring, wait_s=10, now=110)
    # One idle worker: one task queued again, without its preference and ahead of the rest.
    assert [(s.tag, s.preferred, s.priority) for s in manager.submitted] == [("t0", (), 1)]
    assert set(preferring) == {"t1"} and task_ids["t0"] == 101 and 0 not in manager.queued


def test_the_time_before_a_task_was_queued_does_not_count():
    manager = StandIn(idle=2)
    task_ids, preferring = queue(manager, 1)
    preferring["t0"].looked = 50.0  # queued at 50 s, when workers had long been idle
    drop_stale_preferences(manager, task_ids, preferring, wait_s=10, now=55)
    assert not manager.submitted
    drop_stale_preferences(manager, task_ids, preferring, wait_s=10, now=60)
    assert [s.tag for s in manager.submitted] == ["t0"]


def test_a_task_dispatched_where_it_preferred_is_left_alone_until_its_worker_is_lost():
    manager = StandIn(idle=2)
    task_ids, preferring = queue(manager, 2)
    manager.queued.discard(task_ids["t1"])  # TaskVine sent it to a rack-b worker
    drop_stale_preferences(manager, task_ids, preferring, wait_s=5, now=6)
    assert [s.tag for s in manager.submitted] == ["t0"] and set(preferring) == {"t1"}
    manager.queued.add(task_ids["t1"])  # its worker was lost: TaskVine queued it again, still preferring rack-b
    drop_stale_preferences(manager, task_ids, preferring, wait_s=5, now=10)  # waited 4 s since: not yet
    assert len(manager.submitted) == 1
    drop_stale_preferences(manager, task_ids, preferring, wait_s=5, now=12)
    assert [(s.tag, s.preferred) for s in manager.submitted] == [("t0", ()), ("t1", ())] and not preferring
