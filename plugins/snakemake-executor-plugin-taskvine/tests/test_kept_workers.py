"""Workers kept between commands (--taskvine-keep-workers-s), on the sandbox's real HTCondor pool and local workers:
the next command takes the same workers (the same worker ids in both runs' TaskVine logs, no new HTCondor job), a
command that keeps none stops them at once, Ctrl-C stops them, and left alone they end by themselves. With
--taskvine-library, the next command's libraries are forked from the first library's imports (warm.serve_library),
whose server ends with its worker; the workflow's sources stay in the kept workers' caches."""

from __future__ import annotations

import json
import re
import time

import psutil
import pytest
from snakemake_runs import SMALL, alive, condor_jobs, slow_snakefile
from test_interrupt import Run

from snakemake_executor_plugin_taskvine import kept
from snakemake_executor_plugin_taskvine.taskvine import FACTORY_PERIOD_S, JOB_TAG, KEPT_FACTORY_SLACK_S, start_time

pytestmark = pytest.mark.sandbox

QUICK = slow_snakefile("echo {wildcards.i} > {output}", n=2)
SIZES = (
    "--shared-fs-usage",
    "none",
    "--taskvine-max-workers",
    "1",
    *SMALL,
)


@pytest.fixture
def state_home(tmp_path, monkeypatch):
    """The kept workers written down under the test's own directory (the runs inherit XDG_STATE_HOME)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def state(wf) -> dict:
    return json.loads((kept.directory_for(str(wf.root)) / kept.STATE).read_text())


def factories_running(records: list[dict]) -> list[int]:
    return [r["pid"] for r in records if start_time(r["pid"]) == r["started"]]


def tagged_jobs(condor_env, tag: str) -> list[str]:
    """'cluster.proc' of the HTCondor jobs (the workers) of the factory whose jobs carry TAG."""
    return sorted(line.split()[0] for line in condor_jobs(condor_env, f'{JOB_TAG} == "{tag}"'))


def of_each_run(wf, below: str) -> list:
    """BELOW (a path in a manager's most recent TaskVine log directory) of each run of WF, run by run."""
    return sorted(wf.root.glob(f".snakemake/taskvine/*/manager/most-recent/{below}"))


def worker_ids(wf) -> list[set[str]]:
    """The ids of the workers that connected to each run's manager, run by run (TaskVine's transactions logs)."""
    return [
        set(re.findall(r" WORKER (\S+) CONNECTION ", log.read_text()))
        for log in of_each_run(wf, "vine-logs/transactions")
    ]


def libraries(wf) -> list[list[str]]:
    """The library logs of each run, run by run."""
    return [[log.read_text() for log in sorted(run.glob("*.log"))] for run in of_each_run(wf, "library-logs")]


def wait_until(check, timeout_s: float, step_s: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step_s)
    return check()


def test_the_next_command_takes_the_kept_condor_workers_and_one_that_keeps_none_stops_them(
    workflow, condor_env, state_home
):
    wf = workflow(QUICK)
    keep = ("--taskvine-workers", "condor", "--taskvine-keep-workers-s", "300", "--taskvine-library", *SIZES)
    first = wf.run(*keep, check=True)
    assert "the workers stay 300 s" in first.stderr
    records = state(wf)["factories"]
    assert factories_running(records) == [r["pid"] for r in records], "the factory ended with its command"
    tag = records[0]["tag"]
    jobs = tagged_jobs(condor_env, tag)
    assert jobs, "the worker's HTCondor job ended with its command"

    for path in (wf.root / "out").glob("*.txt"):
        path.unlink()
    second = wf.run(*keep, check=True)
    assert "the workers kept by an earlier command connect again" in second.stderr, second.stderr[-3000:]
    assert sorted((wf.root / "out").glob("*.txt")) and len(list((wf.root / "out").glob("*.txt"))) == 2
    ids = worker_ids(wf)
    assert len(ids) == 2 and ids[1] and ids[1] <= ids[0], f"the second run had other workers: {ids}"
    assert state(wf)["factories"] == records, "the second run started factories of its own"
    assert tagged_jobs(condor_env, tag) == jobs, "the second run's workers were new HTCondor jobs"
    first_library, second_library = libraries(wf)
    assert first_library and not any("library forked" in log for log in first_library), first_library
    assert second_library and all("library forked from its worker's library server" in log for log in second_library)
    sent = [log.read_text().count(f"needs file {wf.root / 'Snakefile'} ") for log in of_each_run(wf, "vine-logs/debug")]
    assert sent[0] >= 1 and sent[1] == 0, f"the second run sent the Snakefile again to the kept worker: {sent}"
    servers = [psutil.Process(int(pid)) for pid in re.findall(r"library server \(pid (\d+)\)", "".join(second_library))]
    assert servers and all(map(alive, servers)), servers

    for path in (wf.root / "out").glob("*.txt"):
        path.unlink()
    third = wf.run("--taskvine-workers", "condor", *SIZES, check=True)
    assert "kept" not in third.stderr
    assert factories_running(records) == [], "a command keeping no workers left the kept factory running"
    assert wait_until(lambda: tagged_jobs(condor_env, tag) == [], 30), "the kept workers' jobs are still queued"
    assert not (kept.directory_for(str(wf.root)) / kept.STATE).exists()
    assert wait_until(lambda: not any(map(alive, servers)), 30), "a library server outlived its worker's job"


def test_kept_workers_stay_after_a_jobs_failure_and_end_by_themselves(workflow, state_home):
    wf = workflow(
        QUICK
        + """
rule broken:
    output: "broken.txt"
    shell: "exit 3"
"""
    )
    keep_s = 5
    done = wf.run("all", "broken.txt", "--keep-going", "--taskvine-keep-workers-s", str(keep_s), *SIZES)
    assert done.returncode != 0, "the broken job did not fail"
    assert f"the workers stay {keep_s} s" in done.stderr, "a job's failure stopped the kept workers"
    records = state(wf)["factories"]
    factory = psutil.Process(records[0]["pid"])
    workers = [p for p in factory.children(recursive=True) if p.name() == "vine_worker"]
    assert factories_running(records) and workers, "nothing was kept"
    # A worker ends once it has looked for a manager for keep_s; the factory once it has seen none for keep_s and
    # its slack, at a look (every FACTORY_PERIOD_S, counted from its last look that saw the manager).
    assert wait_until(lambda: not any(alive(w) for w in workers), keep_s + 30), "a kept worker outlived its time"
    most_s = keep_s + KEPT_FACTORY_SLACK_S + 2 * FACTORY_PERIOD_S + 10
    assert wait_until(lambda: not factories_running(records), most_s), "the factory stayed"


def test_ctrl_c_stops_the_workers_it_would_have_kept(workflow, state_home):
    wf = workflow(slow_snakefile("sleep 30; echo {wildcards.i} > {output}", n=2))
    run = Run(wf, "--taskvine-keep-workers-s", "300", *SIZES)
    try:
        directory = kept.directory_for(str(wf.root))
        assert wait_until(lambda: (directory / kept.STATE).exists(), 60), "no factory was written down"
        records = state(wf)["factories"]
        assert wait_until(lambda: list((wf.root / ".snakemake").glob("taskvine/*/manager")), 30)
        time.sleep(5)  # the jobs run
        run.interrupt()
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert factories_running(records) == [], f"Ctrl-C left the kept factory running:\n{run.output()}"
    assert not (directory / kept.STATE).exists()
