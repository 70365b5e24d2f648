"""Workers that sit idle do not take the manager down. TaskVine managers of cctools 7.14.0-7.14.5 crash (SIGSEGV) when
they let go a worker that asked to leave after its idle timeout (cctools #4065, fixed in 7.14.6): with Debian's
7.14.5, six workers idle for 5 s killed the manager in 4 runs of 4, and a run whose larger job waited for its worker
died so. The adapter's workers therefore never ask to leave with such a manager (taskvine._timeout_options); with a
fixed one they leave after their idle time and the manager lives on. Real manager, real workers, on loopback. The
crash does not come every time (about one round in two here), so the test idles out workers in ROUNDS rounds: without
the workaround it failed 3 times in 3 (checked by pretending the installed cctools were fixed).

Whether a worker left because it was idle is read from the manager's transactions log (each DISCONNECTION names its
cause), not from which workers are alive: on a loaded machine (CI's parallel streams) a worker may be dropped for
another cause, which this test does not judge but names in its message."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from snakemake_executor_plugin_taskvine import taskvine
from snakemake_executor_plugin_taskvine.dispatcher import Dispatcher

pytestmark = pytest.mark.sandbox

IDLE_S = 2
WORKERS = 6
ROUNDS = 5


def results_within(dispatcher: Dispatcher, tags: set[str], timeout_s: float) -> set[str]:
    """The tags of TAGS whose results came back within TIMEOUT_S (stops at a manager error)."""
    got: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while got != tags and time.monotonic() < deadline and dispatcher.error is None:
        dispatcher.collect()
        got |= set(dispatcher.take_results())
        time.sleep(0.2)
    return got


@contextlib.contextmanager
def plain_run(run_info: Path):
    """A started dispatcher of a plain manager (no TLS, no library, no environment; its run information in RUN_INFO),
    as (dispatcher, its port, the password file, a list for the workers the test starts); afterwards the workers put
    in that list, the dispatcher and the run's private directory are gone."""
    private = taskvine.private_directory()
    password = taskvine.write_password_file(private)
    dispatcher = Dispatcher(
        dict(
            port=0,
            name=None,
            password_file=password,
            ssl=False,
            run_info_dir=run_info,
            scheduler="files",
            library=False,
            secrets_dir=private,
            environment=None,
            credential_files={},
        ),
        prefer_wait_s=0,
    )
    workers: list[taskvine.Worker] = []
    try:
        yield dispatcher, dispatcher.start(), password, workers
    finally:
        taskvine.stop_all(workers)
        dispatcher.stop()
        taskvine.remove_private_directory(private)


def local_workers(port: int, password: Path, directory: Path, count: int, prefix: str, **options) -> list:
    """COUNT vine_workers on this machine for the manager at PORT, their workspaces DIRECTORY/PREFIX-<i>."""
    return [
        taskvine.Worker(
            manager_host="127.0.0.1",
            manager_port=port,
            workspace=directory / f"{prefix}-{i}",
            password_file=password,
            memory_mb=500,
            disk_mb=500,
            **options,
        )
        for i in range(count)
    ]


def disconnections(run_info: Path) -> list[str]:
    """The causes of the workers' disconnections in the manager's transactions log under RUN_INFO: `time pid WORKER
    id DISCONNECTION cause`."""
    return [
        words[5]
        for log in run_info.rglob("transactions")
        for words in (line.split() for line in log.read_text().splitlines())
        if len(words) > 5 and words[2] == "WORKER" and words[4] == "DISCONNECTION"
    ]


def test_workers_idle_past_their_timeout_leave_the_manager_running(tmp_path):
    with plain_run(tmp_path / "manager") as (dispatcher, port, password, workers):
        for round in range(ROUNDS):
            workers += local_workers(port, password, tmp_path, WORKERS, f"worker-{round}", idle_s=IDLE_S)
            tag = f"round-{round}"
            dispatcher.submit(taskvine.TaskSpec(command="true", tag=tag, cores=1, memory_mb=10, disk_mb=10))
            assert results_within(dispatcher, {tag}, 60) == {tag}, dispatcher.error
            time.sleep(3 * IDLE_S)  # every worker idle well past its idle timeout
            dispatcher.collect()
            assert dispatcher.error is None, f"round {round}: {dispatcher.error}"  # was: "... (killed by SIGSEGV)"
        if taskvine.manager_version() < taskvine.IDLE_LEAVE_FIXED_IN:
            causes = disconnections(tmp_path / "manager")
            left = sum(w.proc.poll() is not None for w in workers)
            assert "IDLE_OUT" not in causes, f"a worker left when idle (the manager may crash): {causes}, {left} ended"
