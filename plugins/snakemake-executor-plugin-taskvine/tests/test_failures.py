"""Failures through the TaskVine executor: a failing job names its rule and shows the worker's output, and
--keep-going finishes the rest; bad settings stop the run at start-up with what to fix."""

from __future__ import annotations

import re
import subprocess

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
    assert "For further error details" in err and not re.search(r"\SFor further error details", err), err[-3000:]


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
    dead.write_text(
        "CONDOR_HOST = 127.0.0.1\nCOLLECTOR_HOST = 127.0.0.1:9\nSCHEDD_HOST = 127.0.0.1\n"
        "TOOL_TIMEOUT_MULTIPLIER = 1\nQ_QUERY_TIMEOUT = 5\n"
    )
    monkeypatch.setenv("CONDOR_CONFIG", str(dead))
    wf = workflow(FAILING)
    done = wf.run("--taskvine-workers", "condor", timeout=120)
    assert done.returncode != 0
    assert "--taskvine-workers condor: no HTCondor schedd is reachable" in done.stderr, done.stderr[-3000:]
    assert not (wf.root / "good.txt").exists()


TOO_LARGE = """
rule all:
    input: "small.txt", "big.txt", "bulky.txt", "special.txt"

rule small:
    output: "small.txt"
    shell: "echo fine > {output}"

rule big:
    output: "big.txt"
    threads: 2
    shell: "echo never > {output}"

rule bulky:
    output: "bulky.txt"
    resources: disk_mb=50000
    shell: "echo never > {output}"

rule special:
    output: "special.txt"
    resources: taskvine_features="gpu"
    shell: "echo never > {output}"

"""

LARGER = """
rule all:
    input: "small.txt", "big.txt"

rule small:
    output: "small.txt"
    shell: "echo fine > {output}"

rule big:
    output: "big.txt"
    threads: 2
    resources: mem_mb=3000
    shell: "echo $SNAKEMAKE_TASKVINE_WORKER_GROUP {threads} > {output}"
"""


def test_local_workers_grow_to_fit_a_larger_job(workflow):
    """With the default worker settings (1 core, 2048 MB), a rule with threads: 2 and mem_mb=3000 runs: the plugin
    starts a local worker of its size (this machine has the cores), and says so."""
    wf = workflow(LARGER)
    done = wf.run("--cores", "4", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (wf.root / "small.txt").read_text() == "fine\n"
    assert (wf.root / "big.txt").read_text() == "workers 2\n"
    assert "rule big needs more than the workers have: started a local worker of 2 cores, 3000 MB" in done.stderr


GROUPS = """
worker_groups:
  - name: rack-a
    features: [rack-a]
    max_workers: 1
  - name: rack-b
    features: [rack-b]
    max_workers: 1
"""

# LARGER's big job, needing rack-b's feature too.
IN_GROUP = LARGER.replace("resources: mem_mb=3000", 'resources: mem_mb=3000, taskvine_features="rack-b"')


def test_worker_groups_grow_to_fit_a_larger_job(workflow):
    """Worker groups of 1 core: a rule with threads: 2 and mem_mb=3000 that needs rack-b's feature gets a worker of
    rack-b (its name and features) with 2 cores."""
    wf = workflow(IN_GROUP)
    groups = wf.root / "groups.yaml"
    groups.write_text(GROUPS)
    done = wf.run("--cores", "4", "--taskvine-worker-groups", str(groups), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (wf.root / "big.txt").read_text() == "rack-b 2\n"
    assert "rule big needs more than the workers have: started a local worker of 2 cores" in done.stderr
    assert "(group rack-b)" in done.stderr


@pytest.mark.pool
def test_condor_workers_grow_to_fit_a_larger_job(workflow, condor_env):
    """HTCondor workers of 1 core and 2048 MB (the defaults): a rule with threads: 2 and mem_mb=3000 gets an
    HTCondor job of its own that asks the pool for 2 cores and 3000 MB, runs there, and is removed at the end; a
    rule with more cores than any slot of the pool has fails at once, naming the flag."""
    wf = workflow(LARGER.replace('"small.txt", "big.txt"', '"small.txt", "big.txt", "huge.txt"') + HUGE)
    # One factory worker of 1 core leaves the sandbox's pool (two partitionable slots of 2 cores) a slot for the job
    # of 2 cores (the run's idle workers hold their slots until it ends: taskvine.IDLE_LEAVE_FIXED_IN).
    done = wf.run(
        "--keep-going", "--cores", "64", "--taskvine-workers", "condor", "--taskvine-max-workers", "1", timeout=400
    )
    assert (wf.root / "small.txt").read_text() == "fine\n", done.stderr[-3000:]
    assert (wf.root / "big.txt").exists() and (wf.root / "big.txt").read_text() == "workers 2\n", done.stderr[-4000:]
    assert "rule big needs more than the workers have: started an HTCondor worker job of 2 cores, 3000 MB" in (
        done.stderr
    )
    slots = subprocess.run(
        ["condor_status", "-af", "TotalSlotCpus"], capture_output=True, text=True, check=True, env=condor_env
    ).stdout.split()
    most = max(map(int, slots))
    assert f"rule huge needs 32 cores (its threads), but a worker started for a larger job may have at most {most}" in (
        done.stderr
    )
    assert "or raise --taskvine-worker-max-cores" in done.stderr
    assert done.returncode != 0 and not (wf.root / "huge.txt").exists()
    (submit,) = (wf.root / ".snakemake" / "taskvine").glob("*/workers/fit-*/worker.submit")
    text = submit.read_text()
    assert "request_cpus = 2\n" in text and "request_memory = 3000\n" in text, text
    assert "vine.password" in text and "--password=vine.password" in text
    # The job ran (its worker connected) and is gone from the queue: its HTCondor log says it ended or was removed.
    log = (submit.parent / "worker.log").read_text()
    assert "Job executing" in log and ("Job was aborted" in log or "Job terminated" in log), log[-2000:]
    tag = re.search(r'\+TaskVineWorkerTag = "(\w+)"', text).group(1)
    queued = subprocess.run(
        ["condor_q", "-constraint", f'TaskVineWorkerTag == "{tag}"', "-af", "ClusterId"],
        capture_output=True,
        text=True,
        check=True,
        env=condor_env,
    )
    assert queued.stdout.strip() == ""


HUGE = """
rule huge:
    output: "huge.txt"
    threads: 32
    shell: "echo never > {output}"
"""

TIME_LIMIT = """
rule all:
    input: "quick.txt", "slow.txt"

rule quick:
    output: "quick.txt"
    resources: runtime=1
    shell: "echo fine > {output}"

rule slow:
    output: "slow.txt"
    resources: runtime=1
    shell: "sleep 300; echo never > {output}"
"""


def test_job_larger_than_any_worker_fails_at_once(workflow):
    """Local workers of 1 core and 2000 MB of disk that may not grow past that: a rule with threads: 2, one with
    disk_mb=50000, and one that needs a worker feature no worker has, fail at once (TaskVine would wait for such a
    worker for ever); the job that fits runs."""
    wf = workflow(TOO_LARGE)
    done = wf.run(
        "--keep-going",
        "--cores",
        "4",
        "--taskvine-worker-cores",
        "1",
        "--taskvine-worker-max-cores",
        "1",
        "--taskvine-max-workers",
        "1",
        "--taskvine-worker-disk-mb",
        "2000",
        "--taskvine-worker-max-disk-mb",
        "2000",
        "--default-resources",
        "mem_mb=100",
        "disk_mb=10",
        timeout=120,
    )
    assert done.returncode != 0
    assert (wf.root / "small.txt").read_text() == "fine\n"
    assert not any((wf.root / f"{name}.txt").exists() for name in ("big", "bulky", "special"))
    most = "a worker started for a larger job may have at most"
    assert f"rule big needs 2 cores (its threads), but {most} 1: lower the rule's threads" in done.stderr
    assert "or raise --taskvine-worker-max-cores" in done.stderr
    assert f"rule bulky needs 50000 MB of disk (its disk_mb), but {most} 2000 MB" in done.stderr
    assert "rule special needs the worker features gpu (its taskvine_features), which no worker of this run has" in (
        done.stderr
    )
    assert "Error in rule big, jobid" in done.stderr and "not run: rule big needs 2 cores" in done.stderr
    # Refused before they ran: no exit code of a command, no pointer to logs they never wrote.
    assert "(command exited with non-zero exit code)" not in done.stderr, done.stderr[-3000:]
    assert "For further error details" not in done.stderr


@pytest.mark.chaos
def test_job_past_its_time_limit_is_ended(workflow):
    """A rule with runtime=1 (minute) that sleeps 5 minutes is ended at its limit by the plugin and fails saying so
    (TaskVine 7.14's own limit ends every task ~5 s after it starts: the job with the same limit that takes no time
    must succeed)."""
    wf = workflow(TIME_LIMIT)
    done = wf.run(
        "--keep-going",
        "--cores",
        "2",
        "--taskvine-worker-cores",
        "1",
        "--taskvine-max-workers",
        "2",
        "--default-resources",
        "mem_mb=100",
        "disk_mb=10",
        timeout=240,
    )  # the slow job alone takes 300 s
    assert done.returncode != 0
    assert (wf.root / "quick.txt").read_text() == "fine\n"
    assert not (wf.root / "slow.txt").exists()
    assert (
        "of rule slow failed" in done.stderr
        and "ran past its time limit, the rule's runtime resource (1 min)" in done.stderr
    ), done.stderr[-3000:]
