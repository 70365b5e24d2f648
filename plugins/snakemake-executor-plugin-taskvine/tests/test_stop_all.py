"""``taskvine.stop_all``: what each process must do right after its SIGTERM (an HTCondor factory's removal of its
jobs) is done for all of them together, so the stop stays bounded with any number of factories; each process group is
killed once; and what they started in groups of their own is ended too. Plain ``sleep`` processes stand in for the
TaskVine binaries."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from snakemake_executor_plugin_taskvine import taskvine


class Acting(taskvine._Process):
    """A process whose ``after_sigterm`` waits for the others' (a barrier: called one after another, it breaks)."""

    def __init__(self, log, barrier: threading.Barrier, calls: list):
        super().__init__(["sleep", "60"], log)
        self.barrier, self.calls = barrier, calls

    def after_sigterm(self) -> None:
        self.calls.append(self.proc.pid)
        self.barrier.wait()


def test_what_each_does_after_its_sigterm_runs_together_and_each_group_is_killed_once(tmp_path):
    barrier, calls = threading.Barrier(3, timeout=20), []
    acting = [Acting(tmp_path / f"a{i}.log", barrier, calls) for i in range(3)]
    plain = taskvine._Process(["sleep", "60"], tmp_path / "plain.log")
    taskvine.stop_all([*acting, plain])  # a serial call would break the barrier (BrokenBarrierError)
    assert sorted(calls) == sorted(p.proc.pid for p in acting)
    assert all(p.proc.returncode is not None and p.group_killed for p in [*acting, plain])
    assert taskvine.still_running([*acting, plain]) == 0


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_what_a_process_started_in_a_group_of_its_own_is_ended_too(tmp_path):
    """As a vine_worker runs each task in a process group of its own: the task outlives a worker killed before it
    ended it, reparented, out of the worker's group; stop_all ends it too."""
    worker = taskvine._Process(["sh", "-c", "setsid sleep 300 & wait"], tmp_path / "worker.log")
    deadline = time.monotonic() + 20
    while not (task := [pid for pid in taskvine._descendants({worker.proc.pid}) if _command(pid) == "sleep"]):
        assert time.monotonic() < deadline, "the stand-in task did not start"  # sleep runs once setsid has run
        time.sleep(0.1)
    (pid,) = task
    assert os.getpgid(pid) != os.getpgid(worker.proc.pid)  # out of the worker's group, as a task is
    taskvine.stop_all([worker])

    def ended() -> bool:  # a SIGKILL is delivered at once but takes effect when the process is next scheduled
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except OSError:
            return True

    deadline = time.monotonic() + 10
    while not ended() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ended(), Path(f"/proc/{pid}/stat").read_text()
