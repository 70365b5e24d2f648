"""Single faults on the real stack (TaskVine workers as HTCondor jobs, reading through the private XCaches of
chaos_stack), each ending in a complete, exact report (0 files lost, 0 counted twice):

- one cache down for the whole run: reads fail over to the other cache;
- the origin and both caches down for ~30 s mid-run: reads back off and retry within the same run;
- the main snakemake process killed (SIGKILL) mid-run: what the next run tells the user, nothing of the first run
  left running, the rerun exact, the first run's cache baseline kept;
- two campaigns at once in the same checkout;
- a straggler: one analysis job's processes stopped (SIGSTOP) for 10 times the median run time of the jobs before
  it (at least HOLD_MIN_S), as on a sick node: the plugin starts a second copy elsewhere, which wins; the file is
  counted once.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time

import pytest
from chaos_stack import (
    alive,
    analysing,
    assert_exact,
    condor_jobs,
    descendants,
    factories,
    factory_scratch,
    manager_address,
    run_seconds,
    wait_until,
    workers,
)

pytestmark = [pytest.mark.sandbox, pytest.mark.chaos]


def test_one_cache_down_for_the_whole_run(xrootd, campaigns):
    xrootd.caches["rack-b"].stop()
    campaign = campaigns("cache-down", {"ttbar": 6, "data": 2}, "files_per_job=2")
    status, output, wall = campaign.run()
    assert status == 0, output[-4000:]
    report = assert_exact(campaign)
    homed_b = {r["path"] for r in report["inputs"] if r["rack"] == "rack-b"}
    assert homed_b, "no file has xcache-b as its home; take more files"
    failovers = {f["path"]: f for f in report["cache"]["failovers"]}
    assert set(failovers) == homed_b
    assert all(f["served_by"] == "xcache-a" and f["failed"][0].startswith("xcache-b: ") for f in failovers.values())
    assert report["cache"]["per_cache"]["xcache-b"]["served_bytes"] == 0
    print(
        f"\ncache down: {len(report['inputs'])} files, {len(homed_b)} failed over, {report['events']} events, "
        f"{wall:.0f} s"
    )


# The outage: read_attempts 6 and read_backoff_s 4 wait 4, 8, 16, 32 and 64 s (each times a jitter in [0.5, 1.5))
# before rounds 2-6: at least 62 s in all, twice the outage, so a read that starts at any moment of it gets through.
OUTAGE_S = 30
OUTAGE_OPTIONS = ("files_per_job=1", "read_attempts=6", "read_backoff_s=4")


def test_origin_and_both_caches_down_30_s_mid_run(xrootd, campaigns):
    campaign = campaigns("outage", {"ttbar": 6, "data": 2}, *OUTAGE_OPTIONS)
    t0 = time.monotonic()
    run = campaign.start()
    try:
        wait_until("the first file analysed", lambda: campaign.analysed() >= 1 or run.poll() is not None, 300)
        assert run.poll() is None and campaign.analysed() < campaign.batches(), "nothing left to read in the outage"
        down = time.monotonic()
        xrootd.stop()
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down)))
        xrootd.start()
        outage_s = time.monotonic() - down
        run.wait(600)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(60)
    assert run.returncode == 0, campaign.output()[-4000:]
    report = assert_exact(campaign)
    # The outage reached reads: files for which a whole round failed (both caches and the origin), read later.
    sources = 1 + len(xrootd.caches)
    met = [
        r["path"]
        for r in report["inputs"]
        if any(sum(f["round"] == k for f in r["fetch"]["failover"]) == sources for k in range(1, 7))
    ]
    assert met, "no read met the outage (every source failing in a round)"
    print(
        f"\noutage: {outage_s:.0f} s down, {len(report['inputs'])} files, {len(met)} read after a failed round, "
        f"{report['events']} events, {time.monotonic() - t0:.0f} s"
    )


def test_main_process_killed_then_rerun(xrootd, campaigns, condor_env):
    campaign = campaigns("killed", {"ttbar": 6, "data": 2}, "files_per_job=1")
    run = campaign.start()
    try:
        wait_until("the first file analysed", lambda: campaign.analysed() >= 1 or run.poll() is not None, 300)
        assert run.poll() is None and campaign.analysed() < campaign.batches(), "the run ended before the kill"
        baseline = (campaign.out / "cache-stats" / "start.json").read_text()
        started = factories(run.pid)
        address = manager_address(started[0])
        scratches = [factory_scratch(f) for f in started]
        seen = [*descendants(run.pid), *workers(address)]
        assert workers(address) and all(condor_jobs(condor_env, s) for s in scratches)
        os.kill(run.pid, signal.SIGKILL)
        run.wait(30)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(60)
    killed = time.monotonic()

    def left() -> list[str]:
        """What of the killed run is still there: its factories, its workers (started by HTCondor, found by its
        manager's address), the jobs' processes, and its HTCondor jobs."""
        return [f"{p.pid} {p.name()}" for p in [*seen, *workers(address)] if alive(p)] + [
            j for s in scratches for j in condor_jobs(condor_env, s)
        ]

    try:
        gone_s = wait_until("the killed run's processes and HTCondor jobs gone", lambda: not left(), 120, poll=1)
    except AssertionError:
        raise AssertionError(f"left {time.monotonic() - killed:.0f} s after the kill: {left()}") from None
    assert (campaign.out / "cache-stats" / "start.json").read_text() == baseline

    print(f"\nkilled main process: its factories, workers and HTCondor jobs gone {gone_s:.0f} s after the kill")

    # The same command again: what is the user told, and does doing what it says finish the campaign exactly?
    flags, steps = [], []
    status, told, _ = campaign.run()
    while status != 0 and len(steps) < 3:
        print(f"--- the run after {steps} said:\n{told[-1500:]}")
        if "--rerun-incomplete" in told and "--rerun-incomplete" not in flags:
            flags.append("--rerun-incomplete")
            steps.append("--rerun-incomplete")
        elif "--unlock" in told and "--unlock" not in steps:
            steps.append("--unlock")
            unlock, unlocked, _ = campaign.run("--unlock", *flags)
            assert unlock == 0, unlocked[-3000:]
        else:
            break
        status, told, _ = campaign.run(*flags)
    assert status == 0, f"after {steps}, the run said:\n{told[-4000:]}"
    print(f"--- the campaign finished after {steps}")
    # The profiles rerun incomplete jobs (rerun-incomplete: true): the user is told one thing, to unlock.
    assert steps == ["--unlock"], steps
    assert_exact(campaign)
    # The first run's cache baseline is the one the report measured from.
    assert json.loads((campaign.out / "cache-stats" / "run.json").read_text())["start"] == json.loads(baseline)


def test_two_campaigns_at_once(xrootd, campaigns):
    first = campaigns("first", {"ttbar": 4, "data": 2}, "files_per_job=1")
    second = campaigns("second", {"ttbar": 5, "data": 1}, "files_per_job=1")
    t0 = time.monotonic()
    runs = [first.start(), second.start()]
    try:
        for run in runs:
            run.wait(900)
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait(60)
    assert [run.returncode for run in runs] == [0, 0], first.output()[-3000:] + second.output()[-3000:]
    for campaign in (first, second):
        assert_exact(campaign)
    print(f"\ntwo campaigns at once: {time.monotonic() - t0:.0f} s")


HOLD_MIN_S = 60


def test_a_straggler_10x_slower_than_the_median(xrootd, campaigns):
    campaign = campaigns("straggler", {"ttbar": 6, "data": 2}, "files_per_job=1")
    started, t0 = time.time(), time.monotonic()
    # Copies after 3 x the median (the default factor), here of jobs of ~10 s: not only after the default 60 s.
    run = campaign.start("--taskvine-straggler-min-s", "5")
    frozen: list = []
    try:
        wait_until(
            "3 analysis jobs done", lambda: len(run_seconds(started, "analyse")) >= 3 or run.poll() is not None, 300
        )
        median = statistics.median(run_seconds(started, "analyse"))
        address = manager_address(factories(run.pid)[0])
        wait_until(
            "an analysis job running",
            lambda: any(analysing(w) for w in workers(address)) or run.poll() is not None,
            120,
            poll=0.2,
        )
        assert run.poll() is None, campaign.output()[-3000:]
        victim = next(w for w in workers(address) if analysing(w))
        frozen = victim.children(recursive=True)
        for proc in frozen:
            proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        hold_s = max(10 * median, HOLD_MIN_S)
        wait_until(
            "the held job ended or its hold passed",
            lambda: not any(alive(p) for p in frozen) or time.monotonic() - stopped > hold_s,
            hold_s + 10,
            poll=0.2,
        )
        held_s = time.monotonic() - stopped
        for proc in frozen:
            if alive(proc):
                proc.send_signal(signal.SIGCONT)
        run.wait(600)
    finally:
        for proc in frozen:
            if alive(proc):
                proc.send_signal(signal.SIGCONT)
        if run.poll() is None:
            run.kill()
            run.wait(60)
    output = campaign.output()
    assert run.returncode == 0, output[-4000:]
    assert "started a second copy" in output, output[-4000:]
    assert held_s < hold_s, f"the stopped job was not cancelled within {hold_s:.0f} s"
    assert_exact(campaign)
    print(
        f"\nstraggler: median job {median:.1f} s, the stopped one cancelled after {held_s:.0f} s (a copy won); "
        f"{len(run_seconds(started, 'analyse'))} analysis jobs, campaign {time.monotonic() - t0:.0f} s"
    )
