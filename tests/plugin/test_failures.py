"""Failures through the TaskVine executor: a failing job names its rule and shows the worker's output, and
--keep-going finishes the rest; bad settings stop the run at start-up with what to fix."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.sandbox

FAILING = """
rule all:
    input: "good.txt", "bad.txt"

rule good:
    output: "good.txt"
    shell: "echo fine > {output}"

rule bad:
    output: "bad.txt"
    shell: "echo 'about to fail: the calibration file is missing' >&2; exit 3"
"""


def test_failing_job_names_rule_and_output_and_keep_going_finishes_rest(workflow):
    wf = workflow(FAILING)
    done = wf.run("--keep-going")
    assert done.returncode != 0
    assert (wf.root / "good.txt").read_text() == "fine\n"
    assert not (wf.root / "bad.txt").exists()
    err = done.stderr
    assert "of rule bad failed on worker" in err, err[-3000:]
    assert "about to fail: the calibration file is missing" in err
    logs = list((wf.root / ".snakemake" / "taskvine").glob("*/failed/bad-*.log"))
    assert len(logs) == 1 and "the calibration file is missing" in logs[0].read_text()
    assert str(logs[0].name) in err  # the log is named in the error


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--taskvine-worker-cores", "-1"], "--taskvine-worker-cores -1: must be at least 1"),
        (["--taskvine-password-file", "/nonexistent/pw"], "--taskvine-password-file /nonexistent/pw: no such file"),
        (["--taskvine-min-workers", "5", "--taskvine-max-workers", "2"], "--taskvine-min-workers 5 is more than"),
    ],
)
def test_bad_settings_fail_at_start(workflow, args, expected):
    wf = workflow(FAILING)
    done = wf.run(*args, timeout=120)
    assert done.returncode != 0
    assert expected in done.stderr, done.stderr[-3000:]
    assert not (wf.root / "good.txt").exists(), "no job may run with bad settings"


def test_condor_workers_without_reachable_pool_fail_at_start(workflow, tmp_path, monkeypatch):
    dead = tmp_path / "dead_condor_config"
    dead.write_text("CONDOR_HOST = 127.0.0.1\nCOLLECTOR_HOST = 127.0.0.1:9\nSCHEDD_HOST = 127.0.0.1\n"
                    "TOOL_TIMEOUT_MULTIPLIER = 1\nQ_QUERY_TIMEOUT = 5\n")
    monkeypatch.setenv("CONDOR_CONFIG", str(dead))
    wf = workflow(FAILING)
    done = wf.run("--taskvine-workers", "condor", timeout=120)
    assert done.returncode != 0
    assert "--taskvine-workers condor: no HTCondor schedd is reachable" in done.stderr, done.stderr[-3000:]
    assert not (wf.root / "good.txt").exists()


TOO_LARGE = """
rule all:
    input: "small.txt", "big.txt"

rule small:
    output: "small.txt"
    shell: "echo fine > {output}"

rule big:
    output: "big.txt"
    threads: 2
    shell: "echo never > {output}"
"""


def test_job_larger_than_any_worker_fails_at_once_naming_rule_and_resource(workflow):
    """Local workers of 1 core and a rule with threads: 2 — TaskVine would wait for a 2-core worker for ever."""
    wf = workflow(TOO_LARGE)
    done = wf.run("--keep-going", "--cores", "4", "--taskvine-worker-cores", "1", "--taskvine-max-workers", "1",
                  timeout=180)
    assert done.returncode != 0
    assert (wf.root / "small.txt").read_text() == "fine\n" and not (wf.root / "big.txt").exists()
    assert "rule big needs 2 cores (its threads), but the largest worker this run starts has 1" in done.stderr
    assert "--taskvine-worker-cores" in done.stderr
