"""Counting a task's lost workers from what TaskVine shows of it (pure logic; the real case is in test_lost_worker)."""

from snakemake_executor_plugin_taskvine.taskvine import GAVE_UP_LOST, LostWorkers, _Losses


def test_a_dispatch_that_ends_without_result_is_a_loss():
    losses = _Losses(retries=1)
    losses.observe(0, 0)  # queued, never sent
    for _ in range(3):  # the same dispatch at every look
        losses.observe(1_000, 0)
    assert losses.lost == 0
    losses.observe(0, 0)  # back in the queue: TaskVine clears the commit time
    assert losses.lost == 1
    losses.observe(2_000, 0)  # sent again
    losses.observe(3_000, 0)  # lost and sent once more between two looks
    assert losses.lost == 2 > losses.retries


def test_a_dispatch_too_short_to_be_seen_shows_in_the_failure_time():
    losses = _Losses(retries=0)
    losses.observe(0, 0)
    losses.observe(0, 750_000)  # sent, lost after 0.75 s and queued again, all between two looks
    assert losses.lost == 1
    losses.observe(5_000, 750_000)  # running again: nothing more lost
    assert losses.lost == 1


class FakeTask:
    """What LostWorkers reads of a TaskVine task: two metrics, its tag and its host."""

    def __init__(self, tag: str):
        self.tag, self.hostname = tag, "w1"
        self.metrics = {"time_when_commit_start": 0, "time_workers_execute_failure": 0}

    def get_metric(self, name: str) -> int:
        return self.metrics[name]


def test_lost_workers_gives_up_only_the_tasks_past_their_retries_and_forgets_ended_ones():
    lost = LostWorkers()
    tasks = {1: FakeTask("a"), 2: FakeTask("b")}
    lost.track(1, retries=0)
    lost.track(2, retries=1)
    assert lost.over_retries(tasks) == []
    for t in tasks.values():
        t.metrics["time_workers_execute_failure"] = 500_000  # both lost a worker between two looks
    [given_up] = lost.over_retries(tasks)
    assert (given_up.task_id, given_up.tag, given_up.result, given_up.lost_workers) == (1, "a", GAVE_UP_LOST, 1)
    assert not given_up.successful and given_up.hostname == "w1" and "lost under it 1 times" in given_up.output
    assert lost.forget(2) == 1  # ended: its count goes into its result
    assert lost.forget(2) == 0  # already forgotten (a task cancelled after its result)
