"""Single faults on the real stack (TaskVine workers as HTCondor jobs, reading through the private XCaches of
chaos_stack), each ending in a complete, exact report (0 files lost, 0 counted twice):

- one cache down for the whole run: reads fail over to the other cache;
- the origin and both caches down for ~30 s mid-run: reads back off and retry within the same run;
- the main snakemake process killed (SIGKILL) mid-run: what the next run tells the user, nothing of the first run
  left running, the rerun exact, the first run's cache baseline kept;
- two campaigns at once in the same checkout.
"""

from __future__ import annotations

import pytest

from chaos_stack import assert_exact

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
    print(f"\ncache down: {len(report['inputs'])} files, {len(homed_b)} failed over, {report['events']} events, "
          f"{wall:.0f} s")
