"""Ctrl-C: the run stops, the tasks are cancelled, the factory, its workers and the manager process are gone — with
HTCondor workers, their jobs are out of the queue — and the same command run again finishes the workflow. (Also:
the run's password is on no command line.)"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
from snakemake_runs import SMALL, alive, busy, condor_jobs_under, kill_all, slow_snakefile, workers_of

pytestmark = pytest.mark.sandbox

# Ctrl-C comes as soon as the first job's sleep is seen, well within 8 s; the rerun then sleeps 2 x 8 s (4 jobs, 2
# workers). The HTCondor test waits for its worker jobs, then 5 s more, before Ctrl-C: its jobs sleep longer.
SLOW = slow_snakefile("sleep 8; echo {wildcards.i} > {output}")
SLOW_CONDOR = slow_snakefile("sleep 20; echo {wildcards.i} > {output}")
ARGS = (
    "--shared-fs-usage",
    "none",
    "--taskvine-max-workers",
    "2",
    *SMALL,
)


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


class Run:
    """A snakemake run whose output is read as it comes (a full pipe would stall it) and kept (PRINTED) to be shown
    if the test fails; interrupt() is Ctrl-C and waits for the run to end."""

    def __init__(self, wf, *args: str):
        self.proc = wf.popen(*args)
        self.printed: list[str] = []
        self.reader = threading.Thread(target=lambda: self.printed.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    def interrupt(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=120)
        self.reader.join(timeout=30)

    def output(self) -> str:
        return "".join(self.printed)[-4000:]


def test_ctrl_c_leaves_nothing_running_and_rerun_resumes(workflow):
    wf = workflow(SLOW)
    started = Run(wf, *ARGS)
    run = started.proc
    try:
        # Names are taken when a process is first seen: short-lived ones may be gone by the time we look again.
        seen: dict[int, psutil.Process] = {}
        first_seen: dict[str, float] = {}  # name → seconds after the start (printed if the test fails)
        start = time.monotonic()
        deadline = start + 120
        while time.monotonic() < deadline and "sleep" not in first_seen:
            for proc in descendants(run.pid):
                try:
                    first_seen.setdefault(proc.name(), round(time.monotonic() - start, 1))
                except psutil.NoSuchProcess:
                    continue
                seen[proc.pid] = proc
            time.sleep(0.5)
        names = set(first_seen)
        assert {"vine_factory", "vine_worker", "sleep"} <= names, names
        # The run's password is handed over in a file (outside the workflow directory), never on a command line
        # that other users can read.
        path = next(
            arg.split("=", 1)[1]
            for proc in seen.values()
            if alive(proc)
            for arg in proc.cmdline()
            if arg.startswith("--password=")
        )
        assert not path.startswith(str(wf.root)), path
        password = open(path).read().strip()
        assert len(password) >= 32
        for proc in seen.values():
            try:
                assert password not in " ".join(proc.cmdline()), proc.cmdline()
            except psutil.NoSuchProcess:
                continue
        started.interrupt()
    finally:
        if run.poll() is None:
            run.kill()
    # Every process the run started (manager, factory, workers, the jobs' commands) has ended.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(p) for p in seen.values()):
        time.sleep(0.5)
    left = [f"{p.pid} {p.name()}" for p in seen.values() if alive(p)]
    assert left == [], f"still running after Ctrl-C: {left}"
    assert not os.path.exists(os.path.dirname(path)), "the run's private directory (password) outlived Ctrl-C"
    why = f"processes first seen at (s): {first_seen}\n{started.output()}"
    assert_rerun_finishes(wf, ARGS, timeout=300, why=why)


@pytest.mark.alone
def test_a_run_with_nothing_to_do_leaves_nothing_running(workflow):
    """Snakemake ends a run that has nothing to do without calling the executor's shutdown: the factory, its
    workers and the manager process started for it end with it all the same (issue 36: a factory and its worker
    outlived such a run, orphaned)."""
    wf = workflow(slow_snakefile("echo {wildcards.i} > {output}"))
    wf.run(*ARGS, check=True)
    again = wf.run(*ARGS, check=True)
    assert "Nothing to be done" in again.stderr, again.stderr[-3000:]
    port = re.search(r"TaskVine manager listening on port (\d+); run directory (\S+)", again.stderr)
    assert port, f"the run did not say where its manager listens:\n{again.stderr[-3000:]}"
    assert (Path(port.group(2)) / "factory").is_dir(), "no factory was started: nothing to check"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and of_manager(int(port.group(1))):
        time.sleep(0.5)
    left = of_manager(int(port.group(1)))
    kill_all(left)
    assert left == [], f"still running after a run with nothing to do: {left}"


def of_manager(port: int) -> list[psutil.Process]:
    """The running vine_factory and vine_worker processes of the manager on PORT (their command lines end with
    the manager's address)."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] in ("vine_factory", "vine_worker") and str(port) in cmdline and alive(proc):
            found.append(proc)
    return found


MANY = 100


@pytest.mark.alone
def test_ctrl_c_with_a_hundred_local_workers_leaves_nothing_within_30_s(workflow):
    """Issue 36: a run with 100 local workers (the factory's), some busy, some idle, some still connecting, is
    interrupted: within 30 s of Ctrl-C nothing of it is left (snakemake, factory, every worker, every job)."""
    wf = workflow(slow_snakefile("sleep 120; echo {wildcards.i} > {output}", n=8))
    args = (
        "--taskvine-min-workers",
        str(MANY),
        "--taskvine-max-workers",
        str(MANY),
        "--taskvine-worker-memory-mb",
        "100",
        "--taskvine-worker-disk-mb",
        "100",
        "--default-resources",
        "mem_mb=10",
        "disk_mb=1",
    )
    started = Run(wf, *args)
    run = started.proc
    seen: dict[int, psutil.Process] = {}
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            for proc in descendants(run.pid):
                seen.setdefault(proc.pid, proc)
            workers = workers_of(run.pid)
            if len(workers) >= MANY // 2 and sum(busy(w) for w in workers) >= 2:
                break
            time.sleep(1)
        workers = workers_of(run.pid)
        assert len(workers) >= MANY // 2 and sum(busy(w) for w in workers) >= 2, (len(workers), started.output())
        interrupted = time.monotonic()
        run.send_signal(signal.SIGINT)
        while time.monotonic() < interrupted + 30 and (run.poll() is None or any(alive(p) for p in seen.values())):
            time.sleep(0.5)
        took = time.monotonic() - interrupted
        left = [f"{p.pid} {p.name()}" for p in seen.values() if alive(p)]
    finally:
        if run.poll() is None:
            run.kill()
        kill_all(p for p in seen.values() if alive(p))  # whatever the assertion below names, not left behind
    assert run.returncode is not None and left == [], f"{took:.0f} s after Ctrl-C still running: {left[:10]}"
    print(f"{len(seen)} processes ({len(workers)} workers) ended {took:.1f} s after Ctrl-C")


def assert_rerun_finishes(wf, args, timeout: float, why: str = "") -> None:
    """What the interrupted run finished is whole (usually nothing: Ctrl-C comes while the first jobs sleep, but a
    slow machine may see their processes late); the same command again finishes the workflow and keeps it."""
    finished = {p.name: p.stat().st_mtime_ns for p in (wf.root / "out").glob("*.txt")}
    assert len(finished) < 4, f"the run had ended before Ctrl-C: nothing was interrupted\n{why}"
    assert all((wf.root / "out" / name).read_text() == f"{name[:-4]}\n" for name in finished), finished
    again = wf.run(*args, timeout=timeout)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(p.read_text() for p in (wf.root / "out").glob("*.txt")) == ["0\n", "1\n", "2\n", "3\n"]
    assert {name: (wf.root / "out" / name).stat().st_mtime_ns for name in finished} == finished, "redone"


def _factory_scratch(pid: int) -> str | None:
    """The scratch directory of the factory that the run with PID started (in the run's private directory); its
    HTCondor jobs run from there."""
    for proc in descendants(pid):
        try:
            if proc.name() == "vine_factory":
                return next(a.split("=", 1)[1] for a in proc.cmdline() if a.startswith("--scratch-dir="))
        except psutil.NoSuchProcess:
            continue
    return None


@pytest.mark.chaos
def test_ctrl_c_removes_condor_workers(workflow, condor_env):
    wf = workflow(SLOW_CONDOR)
    args = ("--taskvine-workers", "condor", *ARGS)
    started = Run(wf, *args)
    run = started.proc
    try:
        deadline = time.monotonic() + 60
        scratch = None
        while time.monotonic() < deadline and scratch is None:
            scratch = _factory_scratch(run.pid)
            time.sleep(0.5)
        assert scratch is not None, "the run started no vine_factory"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not any(j.endswith(" 2") for j in condor_jobs_under(condor_env, scratch)):
            time.sleep(2)
        assert any(j.endswith(" 2") for j in condor_jobs_under(condor_env, scratch)), "no worker job started (status 2)"
        time.sleep(5)  # tasks reach the workers
        started.interrupt()
    finally:
        if run.poll() is None:
            run.kill()
    # The factory removed its worker jobs from the pool on the way out.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and condor_jobs_under(condor_env, scratch):
        time.sleep(2)
    assert condor_jobs_under(condor_env, scratch) == [], "worker jobs left in the HTCondor queue after Ctrl-C"
    assert_rerun_finishes(wf, args, timeout=400)
