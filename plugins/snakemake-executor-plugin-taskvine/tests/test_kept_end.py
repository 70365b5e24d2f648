"""What a run's end does with workers kept between commands (Executor.keeping, Executor.stop_workers), with a stand-in
manager and kept directory: which of the run's workers are stopped, whether the manager is waited for, what is
written down. The real thing, on the sandbox's pool: test_kept_workers.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import snakemake_executor_plugin_taskvine as plugin
from snakemake_executor_plugin_taskvine import Executor
from snakemake_executor_plugin_taskvine.taskvine import Factory

# The run's two factories (never started: stop_all is a stand-in).
FACTORY_A, FACTORY_B = Factory.__new__(Factory), Factory.__new__(Factory)


class FakeDispatcher:
    def __init__(self):
        self.error = self.stopped = None
        self.running = True
        self.asked, self.waited = [], False

    def alive(self) -> bool:
        return self.running

    def ask_to_stop(self, keep: bool = False) -> None:
        self.asked.append(keep)

    def stop(self) -> None:
        self.waited = True


class FakeKept:
    def __init__(self):
        self.done = []

    def keep(self, keep_s: int) -> None:
        self.done.append(("keep", keep_s))

    def forget(self) -> None:
        self.done.append("forget")

    def stop(self) -> None:
        self.done.append("stop")

    def release(self) -> None:
        self.done.append("release")


@pytest.fixture
def run(tmp_path, monkeypatch):
    """An executor at its end: two kept factories and a worker started for a larger job; what stop_all was given."""
    stopped = []
    monkeypatch.setattr(plugin, "stop_all", lambda processes: stopped.append(list(processes)))
    ex = object.__new__(Executor)
    ex.dispatcher, ex.kept, ex.cancelled = FakeDispatcher(), FakeKept(), False
    ex.provisioned = [FACTORY_A, FACTORY_B, "fit-worker"]
    ex.warm_server, ex.private_dir = None, tmp_path / "private"
    ex.logger = SimpleNamespace(info=lambda message: None)
    ex.workflow = SimpleNamespace(executor_settings=SimpleNamespace(keep_workers_s=60))
    return ex, stopped


def test_a_run_that_ends_normally_keeps_its_factories_and_stops_the_rest(run):
    ex, stopped = run
    assert ex.keeping()
    ex.stop_workers(keep=ex.keeping())
    assert stopped == [["fit-worker"]], "a worker started for one larger job is not kept"
    assert ex.dispatcher.asked == [True] and not ex.dispatcher.waited, "the manager ends by itself, releasing them"
    assert ex.kept.done == [("keep", 60), "release"]


@pytest.mark.parametrize(
    "end",
    ["ctrl-c", "manager failed", "manager stopped the run", "manager process gone", "nothing kept"],
)
def test_a_run_that_does_not_end_normally_keeps_nothing(run, end):
    ex, _ = run
    if end == "ctrl-c":
        ex.cancelled = True
    elif end == "manager failed":
        ex.dispatcher.error = "boom"
    elif end == "manager stopped the run":
        ex.dispatcher.stopped = "credentials expired"
    elif end == "manager process gone":
        ex.dispatcher.running = False
    else:
        ex.kept = None
    assert not ex.keeping()


def test_a_run_that_keeps_nothing_stops_its_kept_factories_and_forgets_them(run):
    ex, stopped = run
    ex.stop_workers(keep=False)
    assert stopped == [[FACTORY_A, FACTORY_B, "fit-worker"]]
    assert ex.dispatcher.asked == [False] and ex.dispatcher.waited
    assert ex.kept.done == ["forget", "release"]


def test_a_run_that_failed_before_it_took_the_kept_factories_stops_them(run):
    ex, stopped = run
    ex.provisioned = []
    ex.stop_workers(keep=False)
    assert stopped == [[]]
    assert ex.kept.done == ["stop", "release"]
