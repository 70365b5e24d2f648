"""The process that drives the TaskVine manager.

TaskVine's manager only makes network progress inside ``wait``, and its Python bindings hold the GIL for the whole
wait: in Snakemake's process that starves the scheduler (measured here: other threads ran ~150x slower). So the
manager lives in a child process of its own, and Snakemake's threads talk to it through two pipes — requests
(submit, cancel, stop) down, results up. The child ignores Ctrl-C (the parent decides) and exits when the parent
goes away.

Preferred features (``TaskSpec.preferred``) are soft: a task is first queued asking for them; once it has waited
PREFER_WAIT_S in all while some worker sat idle (time when every worker was busy does not count), it is withdrawn
and queued again without them, ahead of the rest, so that no worker idles while work waits for another group.

Once a second it also asks the manager for the tasks that lost more workers than their retries allow
(``Manager.give_up_lost``) and sends those back as failed.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import signal
import threading
import time

from .taskvine import Manager, TaskResult, TaskSpec

WAIT_S = 1  # each manager.wait(); >= 1, since wait(0) makes no network progress
LOST_CHECK_S = 1  # how often tasks are checked for lost workers (Manager.give_up_lost)
IDLE_S = 0.05
START_TIMEOUT_S = 60


class DispatcherError(RuntimeError):
    pass


def _serve(manager_kwargs: dict, prefer_wait_s: float, requests, results) -> None:
    """The child: own the manager, take requests, send back every finished task."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        manager = Manager(**manager_kwargs)
    except Exception as e:  # reported to the parent, which raises it with context
        results.send(("error", f"{type(e).__name__}: {e}"))
        return
    results.send(("ready", manager.port))
    task_ids: dict[str, int] = {}
    preferring: dict[str, Preferring] = {}  # by tag, the tasks still queued with their preferred features
    lost_checked = time.monotonic()
    try:
        while True:
            while requests.poll(0):
                what, arg = requests.recv()
                if what == "stop":
                    return
                if what == "submit":
                    task_ids[arg.tag] = manager.submit(arg)
                    if arg.preferred:
                        preferring[arg.tag] = Preferring(arg, looked=time.monotonic())
                elif arg in task_ids:
                    manager.cancel(task_ids.pop(arg))
                    preferring.pop(arg, None)
            drop_stale_preferences(manager, task_ids, preferring, prefer_wait_s, time.monotonic())
            if time.monotonic() - lost_checked >= LOST_CHECK_S:
                lost_checked = time.monotonic()
                for result in manager.give_up_lost():
                    _send_result(result, task_ids, preferring, results)
            # Always wait, even with nothing queued: workers and factories are only answered inside wait().
            began = time.monotonic()
            result = manager.wait(WAIT_S)
            if result is None:
                if time.monotonic() - began < IDLE_S:  # with no tasks TaskVine returns at once: do not spin
                    time.sleep(IDLE_S)
                continue
            _send_result(result, task_ids, preferring, results)
    except (EOFError, BrokenPipeError):
        return  # the parent is gone
    except Exception as e:
        results.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        for task_id in task_ids.values():
            manager.cancel(task_id)


def _send_result(result: TaskResult, task_ids: dict, preferring: dict, results) -> None:
    """Forget the finished (or given up) task and send its result to the parent."""
    task_ids.pop(result.tag, None)
    preferring.pop(result.tag, None)
    results.send(("result", result))


@dataclasses.dataclass
class Preferring:
    """A task queued with its preferred features: how long it has waited so far while some worker sat idle, and
    when it was last looked at (at first: when it was queued)."""

    spec: TaskSpec
    looked: float
    idle_waited_s: float = 0.0


def drop_stale_preferences(manager: Manager, task_ids: dict, preferring: dict, wait_s: float, now: float) -> None:
    """Queue again, without their preferred features, the tasks that have now waited WAIT_S in all while workers
    sat idle (the time since a task's last look counts as such when a worker is idle now), one per idle worker."""
    idle = manager.workers_idle() if preferring else 0
    for tag, waiting in list(preferring.items()):
        since, waiting.looked = waiting.looked, now
        if idle == 0:
            continue
        if not manager.is_waiting(task_ids[tag]):
            del preferring[tag]  # it was dispatched where it preferred
            continue
        waiting.idle_waited_s += now - since
        if waiting.idle_waited_s >= wait_s:
            del preferring[tag]
            manager.cancel(task_ids[tag])
            task_ids[tag] = manager.submit(dataclasses.replace(waiting.spec, preferred=(), priority=1))
            idle -= 1


class Dispatcher:
    """Starts the manager process and keeps the results it sends back, by task tag. Thread-safe."""

    def __init__(self, manager_kwargs: dict, prefer_wait_s: float = 30.0):
        context = multiprocessing.get_context("spawn")
        # Pipe(duplex=False) returns (receiving end, sending end).
        requests_in, self._requests = context.Pipe(duplex=False)
        self._results_recv, results_out = context.Pipe(duplex=False)
        self._process = context.Process(target=_serve, name="taskvine-manager", daemon=True,
                                        args=(manager_kwargs, prefer_wait_s, requests_in, results_out))
        self._send_lock = threading.Lock()
        self._recv_lock = threading.Lock()
        self._results: dict[str, TaskResult] = {}
        self.error: str | None = None

    def start(self) -> int:
        """Start the manager; returns its port once it listens."""
        self._process.start()
        if not self._results_recv.poll(START_TIMEOUT_S):
            self.stop()
            raise DispatcherError(f"the TaskVine manager did not start within {START_TIMEOUT_S} s")
        what, value = self._results_recv.recv()
        if what != "ready":
            self.stop()
            raise DispatcherError(f"the TaskVine manager could not start: {value}")
        return value

    def _send(self, message) -> None:
        with self._send_lock:
            self._requests.send(message)

    def submit(self, spec: TaskSpec) -> None:
        if not spec.tag:
            raise ValueError("a dispatched task needs a tag, its key")
        self._send(("submit", spec))

    def cancel(self, tag: str) -> None:
        self._send(("cancel", tag))

    def pop_result(self, tag: str) -> TaskResult | None:
        with self._recv_lock:
            try:
                while self._results_recv.poll(0):
                    what, value = self._results_recv.recv()
                    if what == "result":
                        self._results[value.tag] = value
                    else:
                        self.error = value
            except (EOFError, OSError):
                self.error = self.error or "the TaskVine manager process ended unexpectedly"
            return self._results.pop(tag, None)

    def stop(self, timeout_s: float = 30) -> None:
        if self._process.is_alive():
            try:
                self._send(("stop", None))
            except (BrokenPipeError, OSError):
                pass
            self._process.join(timeout_s)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
