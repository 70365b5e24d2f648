"""When a running task is a straggler: it has run FACTOR times longer than the median run time of its peers (the
finished tasks of its category, i.e. its rule) and at least MIN_S. The dispatcher then starts a second copy of it
on another slot; the first copy to succeed wins and the other is cancelled (dispatcher.py). Pure bookkeeping: no
TaskVine call here.

The median is of the last WINDOW successful run times of a category (so it follows a campaign whose files change)
and only once MIN_PEERS of them have finished: before that a category has no "normal" to compare with.
"""

from __future__ import annotations

import collections
import statistics

MIN_PEERS = 3
WINDOW = 1000


class Stragglers:
    """The finished run times per category, and which running task is a straggler. FACTOR <= 0: never."""

    def __init__(self, factor: float, min_s: float):
        self.factor, self.min_s = factor, min_s
        self._times: dict[str, collections.deque] = {}
        self._medians: dict[str, float] = {}

    def finished(self, category: str, run_s: float) -> None:
        """A task of CATEGORY succeeded after running RUN_S seconds."""
        times = self._times.setdefault(category, collections.deque(maxlen=WINDOW))
        times.append(run_s)
        self._medians.pop(category, None)

    def threshold(self, category: str) -> float | None:
        """How long a task of CATEGORY may run before it is a straggler; None: no limit (yet)."""
        if self.factor <= 0:
            return None
        times = self._times.get(category)
        if times is None or len(times) < MIN_PEERS:
            return None
        if category not in self._medians:
            self._medians[category] = statistics.median(times)
        return max(self.min_s, self.factor * self._medians[category])

    def is_straggler(self, category: str, running_s: float) -> bool:
        limit = self.threshold(category)
        return limit is not None and running_s > limit
