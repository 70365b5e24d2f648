"""The kept workers' directory (kept.py) and its settings: the lock one command holds, what is written down and when
it may be adopted, the password kept with the workers, a process adopted from an earlier command. The real kept
workers, on the sandbox's pool: test_kept_workers.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from snakemake_executor_plugin_taskvine import kept, validation
from snakemake_executor_plugin_taskvine.taskvine import KEPT_FACTORY_SLACK_S, Adopted, Factory, start_time


@pytest.fixture
def state_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def sleeper():
    """A process of its own (an earlier command's factory, say): (its pid, its start time)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc.pid, start_time(proc.pid)
    proc.kill()
    proc.wait()


def test_one_command_at_a_time_holds_a_working_directorys_kept_workers(state_home, tmp_path):
    first = kept.Kept.claim(str(tmp_path))
    assert first is not None
    assert first.directory.parent.parent == state_home / "snakemake-executor-plugin-taskvine"
    assert oct(first.directory.stat().st_mode & 0o777) == "0o700"
    assert kept.Kept.claim(str(tmp_path)) is None, "a second command took the lock the first one holds"
    assert kept.Kept.claim(str(tmp_path / "other")) is not None, "another working directory has its own"
    first.release()
    assert kept.Kept.claim(str(tmp_path)) is not None


def test_a_directory_others_can_enter_is_refused(state_home, tmp_path):
    directory = kept.directory_for(str(tmp_path))
    directory.mkdir(parents=True)
    directory.chmod(0o755)
    with pytest.raises(PermissionError, match="mode 0700"):
        kept.Kept.claim(str(tmp_path))


def test_what_is_written_down_is_adopted_only_with_the_same_fingerprint_every_factory_running_and_time_left(
    state_home, tmp_path, sleeper
):
    pid, started = sleeper
    one = kept.Kept.claim(str(tmp_path))
    one.save(4321, "print-a", [kept.Record("rack-a", pid, started, "tag-a")])
    assert not one.adoptable("print-a"), "a run holds them: it has not said it ended (a killed command never does)"
    one.keep(60)
    one.release()
    two = kept.Kept.claim(str(tmp_path))
    assert (two.port, two.records, two.keep_s) == (4321, [kept.Record("rack-a", pid, started, "tag-a")], 60)
    assert two.adoptable("print-a")
    assert not two.adoptable("print-b"), "started with other settings"
    assert two.adoptable("print-a", now=two.ended + 60 - kept.ADOPT_MARGIN_S - 1)
    assert not two.adoptable("print-a", now=two.ended + 60 - kept.ADOPT_MARGIN_S), "their time is nearly up"
    two.save(4321, "print-a", [kept.Record("rack-a", pid, started + 1, "tag-a")])
    two.keep(60)
    assert not two.adoptable("print-a"), "a process that is not the one written down (its pid reused)"
    two.save(4321, "print-a", [kept.Record("rack-a", pid, started, None), kept.Record("rack-b", 2**22 + 7, 1, None)])
    two.keep(60)
    assert not two.adoptable("print-a"), "one of the factories has ended"
    two.forget()
    assert (two.port, two.records) == (0, [])
    assert not (two.directory / kept.STATE).exists()


def test_a_kept_factory_outlives_its_workers_time_and_leaves_with_no_process_of_ours(tmp_path, sleeper):
    """The arguments of a kept factory (taken from a running process, so that nothing starts here)."""
    pid, started = sleeper
    factory = Factory(
        batch_type="condor",
        manager_host="127.0.0.1",
        manager_port=4321,
        scratch_dir=tmp_path / "factory",
        keep_s=60,
        job_tag="abc",
        process=Adopted(pid, started),
    )
    assert factory.proc.pid == pid and factory.job_tag == "abc"
    assert "--parent-death" not in factory.argv
    assert f"--factory-timeout={60 + KEPT_FACTORY_SLACK_S}" in factory.argv
    workers = next(a for a in factory.argv if a.startswith("--extra-options=")).split("=", 1)[1].split()
    assert "--single-shot" not in workers and "--connect-timeout=60" in workers and "--max-backoff=1" in workers
    assert any('TaskVineWorkerTag = "abc"' in a for a in factory.argv)
    ours = Factory(
        batch_type="condor",
        manager_host="127.0.0.1",
        manager_port=4321,
        scratch_dir=tmp_path / "factory",
        process=Adopted(pid, started),
    )
    assert "--parent-death" in ours.argv and not any(a.startswith("--factory-timeout") for a in ours.argv)
    assert "--single-shot" in next(a for a in ours.argv if a.startswith("--extra-options="))


def test_a_torn_state_is_nothing_to_adopt(state_home, tmp_path):
    directory = kept.directory_for(str(tmp_path))
    directory.mkdir(parents=True, mode=0o700)
    for text in ("{", json.dumps({"port": 1}), json.dumps({"port": 1, "fingerprint": "x", "factories": [{"a": 1}]})):
        (directory / kept.STATE).write_text(text)
        claimed = kept.Kept.claim(str(tmp_path))
        assert (claimed.port, claimed.fingerprint, claimed.records, claimed.ended) == (0, "", [], 0.0)
        claimed.release()


def test_the_password_stays_with_running_workers_and_is_new_otherwise(state_home, tmp_path, sleeper):
    pid, started = sleeper
    claimed = kept.Kept.claim(str(tmp_path))
    first = claimed.password_file()
    assert oct(first.stat().st_mode & 0o777) == "0o600"
    secret = first.read_text()
    assert claimed.password_file().read_text() != secret, "no workers kept: a new password"
    claimed.save(1, "p", [kept.Record("g", pid, started, None)])
    claimed.keep(60)
    secret = claimed.password_file().read_text()
    assert claimed.password_file().read_text() == secret, "the kept workers present this one"


def test_an_adopted_process_is_stopped_like_a_child(sleeper):
    pid, started = sleeper
    adopted = Adopted(pid, started)
    assert adopted.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        adopted.wait(0.2)
    adopted.kill()
    assert adopted.wait(10) == 0  # (ended: its exit status is its parent's to read)
    assert Adopted(pid, started + 1).poll() == 0, "another process with its pid is not it"


def test_stop_with_nothing_kept_says_so(state_home, tmp_path, capsys):
    assert kept.main(["stop-kept", str(tmp_path)]) == 0
    assert "no workers are kept" in capsys.readouterr().out
    held = kept.Kept.claim(str(tmp_path))
    assert kept.main(["stop-kept", str(tmp_path)]) == 1
    assert "holds its kept workers" in capsys.readouterr().out
    held.release()


def settings(**given) -> SimpleNamespace:
    from snakemake_executor_plugin_taskvine import ExecutorSettings

    return SimpleNamespace(**{**ExecutorSettings().__dict__, **given})


@pytest.mark.parametrize(
    "given, said",
    [
        (dict(keep_workers_s=-1), "--taskvine-keep-workers-s -1: must not be negative"),
        (dict(keep_workers_s=60, workers="none"), "keeps the workers that factories start"),
        (dict(keep_workers_s=60, workers="local", worker_groups="g.yaml"), "keeps the workers that factories start"),
    ],
)
def test_keeping_workers_that_no_factory_starts_is_refused(given, said, tmp_path):
    if "worker_groups" in given:
        (tmp_path / "g.yaml").write_text("worker_groups:\n  - name: a\n")
        given["worker_groups"] = str(tmp_path / "g.yaml")
    assert any(said in problem for problem in validation.problems(settings(**given)))


@pytest.mark.parametrize("workers", ["condor", "local"])
def test_keeping_factories_workers_is_allowed(workers):
    assert validation.problems(settings(keep_workers_s=60, workers=workers)) == []


def test_the_state_lives_in_xdg_state_home_else_in_the_home_directory(monkeypatch):
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    assert kept.state_home() == Path(os.path.expanduser("~")) / ".local/state/snakemake-executor-plugin-taskvine"
