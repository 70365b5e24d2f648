"""A task, and the library, can be killed with all they started however the race in cctools' worker went (issue 36;
docs/upstream/cctools-task-kill-race.md): the worker forks the task and makes it the leader of its own process group
from its side only, then kills the group (kill(-pid)). A stand-in worker starts a command line as the worker does
(``/bin/sh -c LINE``; the library's with its arguments appended), in a group of its own when the worker wins the race
and in the worker's group when the task won it, and the test kills the group as the worker would. Before the command
lines made themselves a group (``taskvine.own_group``), the lost race left a kill that signalled no one (ESRCH) and
the task running."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_release import alive, pids_running

from snakemake_executor_plugin_taskvine import taskvine

# The stand-in worker: starts /bin/sh -c argv[1] (in a group of its own if argv[2] is "won"), prints the pid it would
# kill, and waits for it.
WORKER = """
import subprocess, sys
extra = {"process_group": 0} if sys.argv[2] == "won" else {}
task = subprocess.Popen(["/bin/sh", "-c", sys.argv[1]], **extra)
print(task.pid, flush=True)
sys.exit(task.wait() != 0)
"""
# What the task does: starts two children of its own, says their pids, and waits for them.
CHILDREN = "sleep 60 & echo $! >> {pids}; sleep 60 & echo $! >> {pids}; wait"
# The library: writes the arguments it was given, then does what a task does.
LIBRARY = (
    "import subprocess, sys; open({args!r}, 'w').write(' '.join(sys.argv[1:])); "
    "subprocess.run(['/bin/sh', '-c', {children!r}])"
)
APPENDED = "--in-pipe-fd 3 --out-pipe-fd 4 --worker-pid 1"  # as the worker appends to the library's line


def wait_for_lines(path: Path, n: int, timeout_s: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = path.read_text().split() if path.exists() else []
        if len(lines) >= n:
            return [int(line) for line in lines]
        time.sleep(0.05)
    raise AssertionError(f"{path} has not got {n} lines within {timeout_s} s")


def command(kind: str, pids: Path) -> str:
    children = CHILDREN.format(pids=shlex.quote(str(pids)))
    if kind == "task":
        return taskvine.own_group(f"/bin/sh -c {shlex.quote(children)}")
    if kind == "environment":  # as TaskVine writes the line of a task with an environment; this one forks the task
        run_in_env = pids.with_name("run_in_env")
        run_in_env.write_text('#!/bin/sh\nexport IN_ENV=1\n"$@"\n')
        run_in_env.chmod(0o755)
        return taskvine.own_group(f"{shlex.quote(str(run_in_env))} /bin/sh -c {shlex.quote(children)}")
    library = LIBRARY.format(args=str(pids.with_name("args")), children=children)
    return f"{taskvine.own_group(f'{shlex.quote(sys.executable)} -c {shlex.quote(library)}')} {APPENDED}"


def killed_as_the_worker_kills(line: str, race: str, pids: Path) -> list[int]:
    """Run LINE under the stand-in worker (RACE: "won" or "lost"), kill its group as the worker does once it has
    started its two children (their pids in PIDS), and return those of them still running 10 s later."""
    worker = subprocess.Popen([sys.executable, "-c", WORKER, line, race], stdout=subprocess.PIPE, text=True)
    started: list[int] = []
    task = 0
    try:
        task = int(worker.stdout.readline())
        started = wait_for_lines(pids, 2)
        try:
            os.kill(-task, signal.SIGKILL)
        except ProcessLookupError:
            pytest.fail("no process group is the task's: the worker's kill signals no one")
        assert worker.wait(timeout=15) == 1, "the task was not killed"
        return sorted(pids_running(set(started), 10))
    finally:
        if task:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(task, signal.SIGKILL)
        worker.kill()
        worker.stdout.close()
        for pid in started:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("race", ["lost", "won"])
@pytest.mark.parametrize("kind", ["task", "environment", "library"])
def test_the_workers_kill_ends_a_task_and_all_it_started_however_the_fork_race_went(tmp_path, kind, race):
    pids = tmp_path / "pids"
    running = killed_as_the_worker_kills(command(kind, pids), race, pids)
    assert not running, f"what the {kind} started still runs after its group was killed: {running}"
    if kind == "library":
        assert (tmp_path / "args").read_text() == APPENDED, "the arguments appended to the line did not arrive"
