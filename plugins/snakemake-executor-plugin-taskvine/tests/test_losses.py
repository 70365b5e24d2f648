"""Counting a task's lost workers from what TaskVine shows of it (pure logic; the real case is in test_lost_worker)."""

from snakemake_executor_plugin_taskvine.taskvine import _Losses


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
