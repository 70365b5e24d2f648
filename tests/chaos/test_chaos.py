"""The chaos test: a campaign of 48 files through the sandbox profile (TaskVine workers as HTCondor jobs, reading
through the private XCaches of chaos_stack) while workers are killed at random — kill -9 of a vine_worker running
an analysis job (with what it started, as a crashed node), or condor_rm of the HTCondor job that runs one — and one
XCache is killed and restarted mid-run. The report must be complete and exact (0 files missing, duplicated or
unexpected; events in histograms.root = sum of the ok records = the spec's), and the histograms identical to those
of the same campaign run cleanly just before. The figures are printed and written to results/chaos/last-run.json.
"""

from __future__ import annotations

import json
import random
import subprocess
import time

import pytest
from chaos_stack import (
    REPO,
    analysing,
    assert_exact,
    condor_job_of,
    factories,
    kill_all,
    manager_address,
    site_config,
    task_runs,
    wait_until,
    workers,
)

from hepvine.commands import compare

pytestmark = [pytest.mark.sandbox, pytest.mark.chaos]

FILES = {"ttbar": 36, "data": 12}
OPTIONS = ("files_per_job=2",)
WORKER_FAULTS = 6  # at most; spaced 4-10 s apart while analysis jobs remain
SPACING_S = (4.0, 10.0)
CACHE_DOWN_S = 5.0


def test_campaign_survives_killed_workers_and_a_restarted_cache(xrootd, campaigns, condor_env):
    site = site_config(xrootd, max_workers=2)  # two 1-core workers per rack: the pool's 4 slot cores
    clean = campaigns("clean", FILES, *OPTIONS, site=site)
    status, output, clean_wall = clean.run()
    assert status == 0, output[-4000:]
    assert_exact(clean)

    chaos = campaigns("chaos", FILES, *OPTIONS, site=site, spec=clean.spec)
    seed = time.time_ns() % 1_000_000
    rng = random.Random(seed)
    faults: list[dict] = []
    started, t0 = time.time(), time.monotonic()
    run = chaos.start()
    try:
        wait_until("the run's two factories", lambda: len(factories(run.pid)) == 2 or run.poll() is not None, 120)
        address = manager_address(factories(run.pid)[0])
        next_fault = 0.0
        while run.poll() is None and time.monotonic() - t0 < 900:
            worker_faults = sum(f["fault"] != "cache restart" for f in faults)
            remaining = chaos.batches() - chaos.analysed()
            if worker_faults >= WORKER_FAULTS or (chaos.batches() and remaining <= 2):
                break
            busy = [w for w in workers(address) if analysing(w)]
            if time.monotonic() < next_fault or not busy:
                time.sleep(0.3)
                continue
            at = round(time.monotonic() - t0, 1)
            if worker_faults == 2 and not any(f["fault"] == "cache restart" for f in faults):
                rack = rng.choice(sorted(xrootd.caches))
                xrootd.caches[rack].stop()
                time.sleep(CACHE_DOWN_S)
                xrootd.caches[rack].start()
                faults.append({"at_s": at, "fault": "cache restart", "cache": rack, "down_s": CACHE_DOWN_S})
            victim = rng.choice(busy)
            job = condor_job_of(victim)
            if rng.random() < 0.5 or job is None:
                orphans = victim.children(recursive=True)
                kill_all([victim, *orphans])
                faults.append({"at_s": at, "fault": "kill -9 vine_worker", "pid": victim.pid, "job": job})
            else:
                subprocess.run(["condor_rm", job], env=condor_env, check=True, capture_output=True, timeout=60)
                faults.append({"at_s": at, "fault": "condor_rm", "job": job})
            next_fault = time.monotonic() + rng.uniform(*SPACING_S)
        run.wait(900)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(60)
    chaos_wall = time.monotonic() - t0
    assert run.returncode == 0, chaos.output()[-4000:]

    report = assert_exact(chaos)
    difference = compare.compare(
        compare.load(clean.out / "histograms.root"), compare.load(chaos.out / "histograms.root")
    )
    assert difference is None, difference
    worker_faults = [f for f in faults if f["fault"] != "cache restart"]
    assert len(worker_faults) >= 3 and any(f["fault"] == "cache restart" for f in faults), (
        f"too few faults were injected to prove anything (seed {seed}): {faults}"
    )
    tasks = task_runs(started)
    assert tasks["runs"] > tasks["tasks"], f"no task was run again: the faults did not reach TaskVine ({tasks})"
    figures = {
        "seed": seed,
        "faults": faults,
        "files": report["files"]["total"],
        "events": report["events"],
        "lost": len(report["accounting"]["missing"]),
        "double_counted": len(report["accounting"]["duplicated"]),
        "failovers": len(report["cache"]["failovers"]),
        "tasks_run_again": tasks["runs"] - tasks["tasks"],
        "wall_s": {"clean": round(clean_wall, 1), "chaos": round(chaos_wall, 1)},
        "batches": chaos.batches(),
        "histograms_identical_to_clean_run": True,
    }
    (REPO / "results" / "chaos").mkdir(parents=True, exist_ok=True)
    (REPO / "results" / "chaos" / "last-run.json").write_text(json.dumps(figures, indent=2) + "\n")
    print("\nchaos run:", json.dumps(figures, indent=2))
