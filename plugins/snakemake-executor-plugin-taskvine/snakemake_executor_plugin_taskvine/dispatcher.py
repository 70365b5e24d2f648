"""The process that drives the TaskVine manager.

TaskVine's manager only makes network progress inside ``wait``, and its Python bindings hold the GIL for the whole
wait: in Snakemake's process that starves the scheduler (measured here: other threads ran ~150x slower). So the
manager lives in a child process of its own, and Snakemake's threads talk to it through two pipes — requests
(submit, cancel, stop) down, results up. The child ignores Ctrl-C (the parent decides) and exits when the parent
goes away.

Preferred features (``TaskSpec.preferred``) are soft: a task is first queued asking for them; once it has waited
PREFER_WAIT_S in all while some worker sat idle (time when every worker was busy does not count), it is withdrawn
and queued again without them, ahead of the rest, so that no worker idles while work waits for another group.

TaskVine holds at most ``max_tasks`` of the run's tasks at once (0: twice the cores of the connected workers, at
least MIN_TASKS); the rest wait here, in the order they came, and are handed over as TaskVine's tasks end. So
Snakemake may hand over every ready job of a campaign (``--jobs unlimited``: its scheduler then has nothing left to
choose between, which keeps its per-job cost flat) while TaskVine never holds more than it can schedule quickly
(cctools #3957: ~12,000 ready tasks stalled a manager for 10 minutes).

Once a second it also asks the manager for the tasks that lost more workers than their retries allow
(``Manager.give_up_lost``) and sends those back as failed, cancels the tasks that ran past their time limit (sent
back as failed too: TaskVine's own limit is broken, see taskvine.TIME_LIMIT), and starts a second copy of each
straggler: a task that has run far longer than the finished tasks of its rule (``stragglers.py``; the first copy to
succeed wins, the other is cancelled, so a job still ends once).
"""

from __future__ import annotations

import collections
import dataclasses
import fcntl
import json
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .stragglers import Stragglers
from .taskvine import TIME_LIMIT, Manager, TaskResult, TaskSpec

WAIT_S = 1  # each manager.wait(); >= 1, since wait(0) makes no network progress
LOST_CHECK_S = 1  # how often tasks are checked for lost workers (Manager.give_up_lost)
IDLE_S = 0.05
START_TIMEOUT_S = 60
MIN_TASKS = 100  # with max_tasks 0, TaskVine holds at least this many tasks (before workers connect, too)


class DispatcherError(RuntimeError):
    pass


def widen(connection) -> None:
    """Raise the capacity of CONNECTION's pipe to the most an unprivileged process may set (Linux's
    /proc/sys/fs/pipe-max-size, 1 MB by default; elsewhere nothing changes). The manager process reads requests only
    between its waits of WAIT_S: with the default 64 KB a pipe held ~25 jobs (a job's command is ~2 KB), so Snakemake
    could hand over no more than ~25 jobs a second (measured: 8,700 of a 219,000-file campaign's jobs in 5 min)."""
    try:
        size = int(Path("/proc/sys/fs/pipe-max-size").read_text())
        fcntl.fcntl(connection.fileno(), fcntl.F_SETPIPE_SZ, size)
    except (OSError, ValueError, AttributeError):  # not Linux, or not allowed: the default capacity
        pass


def _serve(
    manager_kwargs: dict, prefer_wait_s: float, stragglers: Stragglers, max_tasks: int, requests, results
) -> None:
    """The child: own the manager, take requests, send back every finished task."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        manager = Manager(**manager_kwargs)
    except Exception as e:  # reported to the parent, which raises it with context
        results.send(("error", f"{type(e).__name__}: {e}"))
        return
    results.send(("ready", manager.port))
    detach_output(manager_kwargs.get("run_info_dir"))
    tasks = Tasks(manager, stragglers, results, max_tasks)
    lost_checked = time.monotonic()
    keep = False  # (the workers kept for the next command: "stop" says so)
    try:
        while True:
            while requests.poll(0):
                what, arg = requests.recv()
                if what == "stop":
                    keep = bool(arg)
                    return
                if what == "submit":
                    tasks.submit(arg)
                else:
                    tasks.cancel(arg)
            tasks.feed()
            drop_stale_preferences(manager, tasks.task_ids, tasks.preferring, prefer_wait_s, time.monotonic())
            if time.monotonic() - lost_checked >= LOST_CHECK_S:
                lost_checked = time.monotonic()
                for result in manager.give_up_lost():
                    tasks.finished(result)
                tasks.check_running(time.time())
            # Always wait, even with nothing queued: workers and factories are only answered inside wait().
            began = time.monotonic()
            result = manager.wait(WAIT_S)
            if result is None:
                if time.monotonic() - began < IDLE_S:  # with no tasks TaskVine returns at once: do not spin
                    time.sleep(IDLE_S)
                continue
            tasks.finished(result)
    except (EOFError, BrokenPipeError):
        return  # the parent is gone
    except Exception as e:
        results.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        tasks.cancel_all()
        manager.close(keep)  # the workers still connected are released (the parent stops what it provisioned meanwhile)


OUTPUT = "manager-output.log"  # what the manager process writes once it listens, in its run-info directory


def detach_output(run_info_dir: Path | None) -> None:
    """From now on the manager process writes (TaskVine's messages, a crash's) to OUTPUT in RUN_INFO_DIR, not to its
    parent's standard output and error: so that a caller reading those (a pipe: ``snakemake ... | tee``, a script's
    capture) has their end when Snakemake exits, not when a manager that ends by itself after it does (a run whose
    workers are kept does not wait for it). Before, what stops its start is said on the parent's error."""
    if run_info_dir is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        fd = os.open(Path(run_info_dir) / OUTPUT, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as e:  # (it goes on writing where its parent does)
        print(f"TaskVine manager: cannot write to {run_info_dir}: {e}", file=sys.stderr, flush=True)
        return
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


# The manager process's program: Ctrl-C ignored from its first statement (the parent decides), the parent's module
# path (argv[1], as spawn gives it), then ``child`` with its pipes' ends (argv[2:]).
CHILD = (
    "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    f"from {__name__} import child; child(int(sys.argv[2]), int(sys.argv[3]))"
)


def child(requests_fd: int, results_fd: int) -> None:
    """The manager process: its arguments are the first request; then ``_serve``."""
    requests = multiprocessing.connection.Connection(requests_fd, writable=False)
    results = multiprocessing.connection.Connection(results_fd, readable=False)
    try:
        args = requests.recv()
    except EOFError:
        return  # the parent is gone
    except Exception as e:  # (arguments of a class this interpreter cannot import)
        results.send(("error", f"its arguments could not be read: {type(e).__name__}: {e}"))
        return
    _serve(*args, requests, results)


class Tasks:
    """The child's tasks by tag: each one's spec, its TaskVine task, and the second copy of a straggler. A tag's
    result goes up once: the first copy to succeed wins and the other is cancelled; a copy that fails while the
    other still runs is forgotten, and only the last copy's failure goes up. Specs beyond what TaskVine may hold
    (MAX_TASKS; 0: twice the connected workers' cores, at least MIN_TASKS) wait in BACKLOG, in order."""

    def __init__(self, manager: Manager, stragglers: Stragglers, results, max_tasks: int = 0):
        self.manager, self.stragglers, self.results, self.max_tasks = manager, stragglers, results, max_tasks
        self.specs: dict[str, TaskSpec] = {}
        self.task_ids: dict[str, int] = {}
        self.copies: dict[str, int] = {}  # by tag, the second copy of a straggler
        self.preferring: dict[str, Preferring] = {}  # by tag, the tasks still queued with their preferred features
        self.backlog: collections.deque[TaskSpec] = collections.deque()  # not yet handed to TaskVine
        self.held: tuple[str, ...] | None = None  # the expired credentials the backlog waits for, once told
        self.stopping = False  # the run was told to stop (hold)

    def submit(self, spec: TaskSpec) -> None:
        self.specs[spec.tag] = spec
        self.backlog.append(spec)
        self.feed()

    def limit(self) -> int:
        """How many tasks TaskVine may hold now."""
        return self.max_tasks or max(MIN_TASKS, 2 * self.manager.cores_connected())

    def feed(self) -> None:
        """Hand TaskVine the backlog's specs, in order, while it holds fewer than limit(); a cancelled spec (or one
        submitted again since) is dropped. While a credential the tasks carry has expired, nothing is handed out and
        the tasks TaskVine has not dispatched yet are taken back (hold)."""
        if not self.backlog and not self.task_ids:
            return
        expired = self.manager.expired_credentials()
        if expired:
            self.take_back_queued()
            self.hold(expired)
            return
        self.held = None
        room = self.limit() - len(self.task_ids)
        while room > 0 and self.backlog:
            spec = self.backlog.popleft()
            if self.specs.get(spec.tag) is not spec or spec.tag in self.task_ids:
                continue
            self.task_ids[spec.tag] = self.manager.submit(spec)
            if spec.preferred:
                self.preferring[spec.tag] = Preferring(spec, looked=time.monotonic())
            room -= 1

    def take_back_queued(self) -> None:
        """Cancel the tasks TaskVine holds but has not dispatched to a worker yet (and queued straggler copies), and
        put their specs back at the front of the backlog, in their order."""
        now = time.time()
        queued = [tag for tag, task_id in self.task_ids.items() if self.manager.running_s(task_id, now) is None]
        for tag in queued:
            self.manager.cancel(self.task_ids.pop(tag))
            self.preferring.pop(tag, None)
        for tag, task_id in list(self.copies.items()):
            if self.manager.running_s(task_id, now) is None:
                self.manager.cancel(self.copies.pop(tag))
        self.backlog.extendleft(self.specs[tag] for tag in reversed(queued))

    def hold(self, expired: list[str]) -> None:
        """Keep the backlog while EXPIRED credentials are (their tasks would be refused by the storage and counted
        as failures): told once; the backlog goes out as soon as the file is renewed. Once no task runs any more,
        the run is stopped with what to do (nothing was counted for the tasks never handed out)."""
        waiting = sum(1 for spec in self.backlog if self.specs.get(spec.tag) is spec)
        if not waiting:  # the last tasks run: nothing is held
            return
        what = "; ".join(expired)
        if self.held != tuple(expired):
            self.held = tuple(expired)
            self.results.send(
                (
                    "note",
                    f"TaskVine: {what}: no more tasks are handed out ({waiting} waiting; {len(self.task_ids)} "
                    "running finish with theirs): renew it, and they go out at once",
                )
            )
        if not self.task_ids and not self.stopping:
            self.stopping = True
            self.results.send(
                (
                    "stop",
                    f"{what}: {waiting} job(s) were not run, and nothing was counted for them. Renew it (e.g. "
                    "voms-proxy-init, htgettoken) and run the same command again: what is done is kept",
                )
            )

    def cancel(self, tag: str) -> None:
        for task_id in self._forget(tag):
            self.manager.cancel(task_id)

    def cancel_all(self) -> None:
        for tag in list(self.specs):
            self.cancel(tag)

    def _forget(self, tag: str) -> list[int]:
        self.specs.pop(tag, None)
        self.preferring.pop(tag, None)
        return [i for i in (self.task_ids.pop(tag, None), self.copies.pop(tag, None)) if i is not None]

    def finished(self, result: TaskResult) -> None:
        """RESULT of one copy of a tag (finished, or given up after lost workers)."""
        tag = result.tag
        if tag not in self.specs:
            return  # a copy cancelled after its tag's result went up
        if not result.successful and tag in self.copies:  # the other copy runs on: let it finish
            if self.task_ids[tag] == result.task_id:
                self.task_ids[tag] = self.copies.pop(tag)
            else:
                del self.copies[tag]
            return
        if not result.successful and result.credentials_renewed:  # perhaps refused for the old one: the new one
            self.task_ids.pop(tag, None)
            self.preferring.pop(tag, None)
            self.backlog.appendleft(self.specs[tag])
            self.results.send(
                ("note", f"TaskVine task {tag} failed after a credential it carried was renewed: it runs again")
            )
            return
        for task_id in self._forget(tag):
            if task_id != result.task_id:
                self.manager.cancel(task_id)
        if result.successful:
            self.stragglers.finished(result.category, result.run_s)
        self.results.send(("result", result))

    def check_running(self, now: float) -> None:
        """End the copies that ran past their time limit, then copy the stragglers."""
        for tag, task_id in list(self.task_ids.items()):
            self._enforce_time_limit(tag, task_id, now)
        self.copy_stragglers(now)

    def _enforce_time_limit(self, tag: str, task_id: int, now: float) -> None:
        """Cancel the copy TASK_ID of TAG if it has run past its spec's time_max_s; the job fails with that, unless
        its other copy still runs."""
        limit_s = self.specs[tag].time_max_s
        running_s = self.manager.running_s(task_id, now) if limit_s else None
        if running_s is None or running_s <= limit_s:
            return
        hostname = self.manager.hostname(task_id)
        self.manager.cancel(task_id)
        self.finished(
            TaskResult(
                task_id=task_id,
                tag=tag,
                successful=False,
                exit_code=None,
                result=TIME_LIMIT,
                hostname=hostname,
                category=self.specs[tag].category,
                run_s=running_s,
                output=f"The task ran {running_s:.0f} s on {hostname or 'its worker'}, past its time limit of "
                f"{limit_s} s, and was cancelled.\n",
            )
        )

    def copy_stragglers(self, now: float) -> None:
        """Start a second copy of each task that has run far longer than its peers (stragglers.py), ahead of the
        queue, without its preferred features; at most one copy per task."""
        for tag, task_id in list(self.task_ids.items()):
            spec = self.specs[tag]
            limit = self.stragglers.threshold(spec.category)
            if limit is None or tag in self.copies:
                continue
            running_s = self.manager.running_s(task_id, now)
            if running_s is not None and running_s > limit:
                self.copies[tag] = self.manager.submit(dataclasses.replace(spec, preferred=(), priority=2))
                self.results.send(
                    (
                        "note",
                        f"TaskVine task {tag} has run {running_s:.0f} s, more than {limit:.0f} s "
                        f"(--taskvine-straggler-factor times the median of rule {spec.category}'s "
                        "finished tasks): started a second copy; the first to succeed wins",
                    )
                )


@dataclasses.dataclass
class Preferring:
    """A task queued with its preferred features: how long it has waited so far while some worker sat idle, and
    when it was last looked at (at first: when it was queued)."""

    spec: TaskSpec
    looked: float
    idle_waited_s: float = 0.0


def drop_stale_preferences(manager: Manager, task_ids: dict, preferring: dict, wait_s: float, now: float) -> None:
    """Queue again, without their preferred features, the tasks that have now waited WAIT_S in all while workers
    sat idle (the time since a task's last look counts as such when a worker is idle now), one per idle worker. A
    task stays in PREFERRING until it ends (Tasks._forget) or loses its preference: one sent back to the queue
    after a lost worker waits again."""
    idle = manager.workers_idle() if preferring else 0
    for tag, waiting in list(preferring.items()):
        since, waiting.looked = waiting.looked, now
        if idle == 0:
            continue
        if not manager.is_waiting(task_ids[tag]):
            # On a worker where it preferred. It stays here: should that worker be lost, TaskVine queues it again
            # with its preferred features, and it waits anew (seen in the chaos test: a requeued task waited 6 min
            # for a rack whose workers could not start while the other rack's workers idled).
            waiting.idle_waited_s = 0.0
            continue
        waiting.idle_waited_s += now - since
        if waiting.idle_waited_s >= wait_s:
            del preferring[tag]
            manager.cancel(task_ids[tag])
            task_ids[tag] = manager.submit(dataclasses.replace(waiting.spec, preferred=(), priority=1))
            idle -= 1


class Dispatcher:
    """Starts the manager process and keeps the results it sends back, by task tag. Thread-safe."""

    def __init__(
        self,
        manager_kwargs: dict,
        prefer_wait_s: float = 30.0,
        stragglers: Stragglers | None = None,
        max_tasks: int = 0,
    ):
        # Pipe(duplex=False) returns (receiving end, sending end).
        self._requests_in, self._requests = multiprocessing.Pipe(duplex=False)
        self._results_recv, self._results_out = multiprocessing.Pipe(duplex=False)
        widen(self._requests)
        widen(self._results_recv)
        self._serve_args = (manager_kwargs, prefer_wait_s, stragglers or Stragglers(factor=0, min_s=0), max_tasks)
        self._process: subprocess.Popen | None = None
        self._send_lock = threading.Lock()
        self._recv_lock = threading.Lock()
        self._results: dict[str, TaskResult] = {}
        self.notes: list[str] = []  # what the manager process tells the user (taken by take_notes)
        self.error: str | None = None
        self.stopped: str | None = None  # why the manager process cannot go on (an expired credential)
        self._stop_asked = False  # (ask_to_stop: once)

    def start(self) -> int:
        """Start the manager; returns its port once it listens.

        The manager's process is a new interpreter (``python -c CHILD``, the pipes' ends passed as file descriptors,
        this process's module path on its command line, its arguments the first message down) that imports this
        plugin's package and TaskVine — not multiprocessing's spawn, which runs the parent's main module again:
        Snakemake's command line, 0.3 s more before the manager listens and the workers are asked for."""
        arguments = pickle.dumps(self._serve_args)  # (one that cannot be pickled is this process's error)
        ends = (self._requests_in.fileno(), self._results_out.fileno())
        try:
            self._process = subprocess.Popen(  # (-P: the working directory is not put first on its module path)
                [sys.executable, "-P", "-c", CHILD, json.dumps(sys.path), *map(str, ends)],
                stdin=subprocess.DEVNULL,
                pass_fds=ends,
            )
        except OSError as e:
            raise DispatcherError(f"the TaskVine manager's process could not start: {e}") from e
        finally:  # the child's ends are the child's alone: with the parent's copies closed, its end is an end of file
            self._requests_in.close()
            self._results_out.close()
        try:
            with self._send_lock:
                self._requests.send_bytes(arguments)
            if not self._results_recv.poll(START_TIMEOUT_S):
                self.stop()
                raise DispatcherError(f"the TaskVine manager did not start within {START_TIMEOUT_S} s")
            what, value = self._results_recv.recv()
        except (EOFError, OSError):  # (a broken pipe: it ended before it read its arguments)
            what, value = "error", f"its process ended ({self._ended()}); its error is above"
        if what != "ready":
            self.stop()
            raise DispatcherError(f"the TaskVine manager could not start: {value}")
        return value

    def alive(self) -> bool:
        """Whether the manager's process runs."""
        return self._alive()

    def _alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _join(self, timeout_s: float) -> None:
        try:
            self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass

    def _send(self, message) -> None:
        with self._send_lock:
            self._requests.send(message)

    def submit(self, spec: TaskSpec) -> None:
        if not spec.tag:
            raise ValueError("a dispatched task needs a tag, its key")
        self._send(("submit", spec))

    def cancel(self, tag: str) -> None:
        self._send(("cancel", tag))

    def collect(self) -> None:
        """Read what the manager process has sent since the last call: results (kept by tag until take_results takes
        them), notes and errors. Once per status check, not once per job: a campaign may have every job active."""
        with self._recv_lock:
            try:
                while self._results_recv.poll(0):
                    what, value = self._results_recv.recv()
                    if what == "result":
                        self._results[value.tag] = value
                    elif what == "note":
                        self.notes.append(value)
                    elif what == "stop":
                        self.stopped = value
                    else:
                        self.error = value
            except (EOFError, OSError):
                where = self._serve_args[0].get("run_info_dir")
                note = f"; what it wrote is in {Path(where) / OUTPUT}" if where else ""
                self.error = self.error or f"the TaskVine manager process ended unexpectedly ({self._ended()}){note}"

    def _ended(self) -> str:
        """How the manager process ended (its exit status or the signal that ended it), as far as known."""
        if self._process is None:
            return "not started"
        self._join(1)
        code = self._process.returncode
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit status {code}"

    def take_results(self) -> dict[str, TaskResult]:
        """The results collect() has read and nobody has taken yet, by task tag (each result is taken once)."""
        with self._recv_lock:
            results, self._results = self._results, {}
        return results

    def keep_results(self, results: dict[str, TaskResult]) -> None:
        """Give back RESULTS taken but not used (of jobs the caller did not know yet): the next take has them."""
        with self._recv_lock:
            self._results.update(results)

    def take_notes(self) -> list[str]:
        """What the manager process has told since the last call (read with the results, by collect)."""
        with self._recv_lock:
            notes, self.notes = self.notes, []
        return notes

    def ask_to_stop(self, keep: bool = False) -> None:
        """Tell the manager process to end at its next turn (within WAIT_S: a wait in progress is not cut short, and
        a worker's library keeps TaskVine's wait busy for all of it), without waiting for it: the run's last
        seconds, such as stopping what it provisioned, go on meanwhile. ``stop`` then waits for it. With KEEP its
        workers are released, not told to exit (Manager.close)."""
        if self._alive() and not self._stop_asked:
            self._stop_asked = True
            try:
                self._send(("stop", keep))
            except (BrokenPipeError, OSError):
                pass

    def stop(self, timeout_s: float = 30) -> None:
        if self._alive():
            self.ask_to_stop()
            self._join(timeout_s)
        if self._alive():
            self._process.kill()
            self._process.wait()
