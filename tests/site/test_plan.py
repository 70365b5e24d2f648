"""The planner's flow model on published and made-up sites: the UChicago facility as published is capped near
200 Gbps by its 80 Gbps interconnect when tasks ignore racks, and rack-aware affinity lifts it to the cores' limit;
the numbers below are worked out by hand from the site config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hepvine.commands import plan, rates
from hepvine.routing import site as hv_site

REPO = Path(__file__).resolve().parents[2]
UCHICAGO = REPO / "site-configs" / "uchicago-af.yaml"
LZMA_PER_CORE = 0.121  # Gbps, about what `make bench` measures for LZMA inputs here


@pytest.fixture(scope="module")
def uchicago():
    site = hv_site.load(UCHICAGO)
    files = plan.files_of("20000:17TB", None)
    return site, files, plan.capacities(site, LZMA_PER_CORE)


def test_random_placement_is_capped_by_the_interconnect(uchicago):
    site, files, cap = uchicago
    out = plan.best("random", plan.shares("random", files, site), cap, cold=False)
    # 5 of 8 caches in rack 1, 1,000 of 2,504 cores there: rack 1 -> rack 2 carries 5/8 x 1504/2504 of the rate,
    # and 80 Gbps / 0.3754 = 213 Gbps.
    assert out.gbps == pytest.approx(80 / (5 / 8 * 1504 / 2504), rel=0.002)
    assert out.bottleneck == "interconnect af-rack-1 -> af-rack-2 (80 Gbps)"


def test_affinity_lifts_the_cap_to_the_cores(uchicago):
    site, files, cap = uchicago
    random = plan.best("random", plan.shares("random", files, site), cap, cold=False)
    affinity = plan.best("affinity", plan.shares("affinity", files, site), cap, cold=False)
    assert affinity.gbps == pytest.approx(2504 * LZMA_PER_CORE, rel=0.01)  # every core busy
    assert affinity.bottleneck.startswith("cores of") and affinity.cross_rack_gbps < 80
    assert affinity.gbps > 1.4 * random.gbps


def test_shares_follow_the_placement(uchicago):
    site, files, _ = uchicago
    for policy in plan.POLICIES:
        share = plan.shares(policy, files, site)
        assert sum(share.values()) == pytest.approx(1.0) and len(share) == 8
        assert all(0.10 < s < 0.15 for s in share.values()), (policy, share)  # close to 1/8 over 20k files
    assert set(plan.shares("random", files, site).values()) == {1 / 8}


def test_without_a_rack_constraint_every_policy_is_the_same(tmp_path):
    config = (
        (REPO / "site-configs" / "uchicago-af.yaml")
        .read_text()
        .replace("interconnect_gbps: 80", "interconnect_gbps: 100000")
    )
    (tmp_path / "wide.yaml").write_text(config)
    site = hv_site.load(tmp_path / "wide.yaml")
    files = plan.files_of("1000:1TB", None)
    cap = plan.capacities(site, 10.0)  # fast cores: the caches limit, 8 x 50 Gbps at best
    rates = {p: plan.best(p, plan.shares(p, files, site), cap, cold=True).gbps for p in plan.POLICIES}
    assert rates["random"] == pytest.approx(200, rel=0.001)  # cold: the origin sends every byte (200 Gbps)
    assert rates["affinity"] == pytest.approx(rates["hashing"], rel=0.001)


def test_command_writes_table_and_plot_and_explains_a_missing_benchmark(tmp_path):
    cmd = [sys.executable, "-m", "hepvine.commands.cli", "plan", "--site", str(UCHICAGO), "--dataset", "2000:2TB"]
    missing = subprocess.run(cmd + ["--bench", str(tmp_path / "none.json")], capture_output=True, text=True)
    assert missing.returncode == 2 and "run `make bench`" in missing.stderr
    done = subprocess.run(
        cmd + ["--per-core-gbps", str(LZMA_PER_CORE), "--output", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "random" in done.stdout and "interconnect af-rack-1 -> af-rack-2" in done.stdout
    result = json.loads((tmp_path / "uchicago-af.json").read_text())
    assert [p["policy"] for p in result["policies"]] == list(plan.POLICIES)
    assert (tmp_path / "uchicago-af.png").stat().st_size > 10_000


def run_plan(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``hepvine plan`` on UChicago, run in CWD (where it looks for results/bench/analysis.json)."""
    return subprocess.run(
        [sys.executable, "-m", "hepvine.commands.cli", "plan", "--site", str(UCHICAGO), *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
    )


def table(stdout: str) -> dict[str, float]:
    """Gbps per policy from the printed table."""
    return {
        line.split()[0]: float(line.split()[1])
        for line in stdout.splitlines()
        if line.split() and line.split()[0] in plan.POLICIES
    }


def test_fresh_clone_plans_with_the_shipped_rates(tmp_path):
    # No results/bench/analysis.json under tmp_path: the rate shipped with hepvine is used, and the output says so.
    done = run_plan("--dataset", "2000:2TB", "--codec", "lzma", cwd=tmp_path)
    shipped = rates.ANALYSIS["lzma"]
    per_core = shipped["hz_per_core"] * shipped["bytes_per_event"] * 8 / 1e9
    assert f"per-core rate: {per_core:.3f} Gbps, shipped with hepvine: {rates.provenance()}" in done.stdout
    assert "2026-11-22" in done.stdout and "make bench" in done.stdout
    result = json.loads((tmp_path / "results" / "plan" / "uchicago-af.json").read_text())
    assert result["per_core_gbps"] == pytest.approx(per_core) and result["codec"] == "lzma"
    assert result["per_core_source"].startswith("shipped with hepvine: ")
    gbps = table(done.stdout)
    assert gbps["random"] == pytest.approx(213, rel=0.01) and gbps["affinity"] > 1.4 * gbps["random"], gbps


def test_readme_command_with_a_given_rate(tmp_path):
    # The README's command with --per-core-gbps 0.2: 2,504 cores x 0.2 = 501 Gbps of cores, so affinity reaches the
    # caches (8 x 50 Gbps, shared unevenly by rendezvous hashing), while random and hashing stop at the interconnect.
    done = run_plan("--dataset", "219000:191TB", "--per-core-gbps", "0.2", cwd=tmp_path)
    assert "per-core rate: 0.200 Gbps, given (--per-core-gbps)" in done.stdout
    assert {p: round(g) for p, g in table(done.stdout).items()} == {"random": 213, "hashing": 213, "affinity": 398}


def test_a_local_bench_result_takes_precedence(tmp_path):
    bench = tmp_path / "results" / "bench" / "analysis.json"
    bench.parent.mkdir(parents=True)
    bench.write_text(
        json.dumps(
            {
                "rates_hz_per_core": {"hepvine_zstd": 1e6, "hepvine_lzma": 1e5},
                "bytes": {"read_per_event_zstd": 125.0, "read_per_event_lzma": 100.0},
            }
        )
    )
    done = run_plan("--dataset", "2000:2TB", cwd=tmp_path)
    assert "per-core rate: 1.000 Gbps, local bench results/bench/analysis.json (zstd inputs" in done.stdout
    bench.write_text("{}")
    broken = subprocess.run(
        [sys.executable, "-m", "hepvine.commands.cli", "plan", "--site", str(UCHICAGO), "--dataset", "2000:2TB"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert broken.returncode == 2 and "not a `make bench` result" in broken.stderr, broken.stderr


def test_a_campaigns_length_is_estimated_from_the_model(tmp_path):
    """What a first run's credential check is told (hepvine.commands.plan.estimated_seconds): the bytes its events
    read over the affinity policy's rate where the caches' capacities are known, else over the cores at the per-core
    rate; no estimate rather than an error where the model has nothing to go on."""
    site = hv_site.load(UCHICAGO)
    files = [(f"/store/plan/file_{i:05d}.root", 1e6) for i in range(20000)]  # 2 x 10^10 events
    seconds, how = plan.estimated_seconds(site, files, "lzma")
    calib = plan.calibration(None, "lzma")
    read = [(name, n * calib.bytes_per_event) for name, n in files]
    rate = plan.best("affinity", plan.shares("affinity", read, site), plan.capacities(site, calib.per_core_gbps), False)
    assert seconds == pytest.approx(2e10 * calib.bytes_per_event * 8 / 1e9 / rate.gbps, rel=1e-6)
    assert "20,000 files, 20,000,000,000 events" in how and "with affinity" in how and "lzma inputs" in how
    # No rate can beat the cores: at most all of them at the per-core rate, i.e. events / (cores x events/s a core).
    cores = sum(site.rack_cores().values())
    assert seconds >= 2e10 * calib.bytes_per_event * 8 / 1e9 / (cores * calib.per_core_gbps) * (1 - 1e-9)
    bare = tmp_path / "bare.yaml"
    bare.write_text(UCHICAGO.read_text().replace(", gbps: 50}", "}"))  # caches without capacities: the cores alone
    seconds, how = plan.estimated_seconds(hv_site.load(bare), files, "lzma")
    assert seconds == pytest.approx(2e10 * calib.bytes_per_event * 8 / 1e9 / (cores * calib.per_core_gbps), rel=1e-6)
    assert f"{cores} cores at" in how
    # A site with no caches at all (access direct), no events, a bench result that cannot be read: no estimate.
    direct = tmp_path / "direct.yaml"
    direct.write_text(
        "\n".join(
            "access: direct" if line.startswith("access:") else line
            for line in UCHICAGO.read_text().splitlines()
            if not line.startswith(("caches:", "  - {name: xcache"))
        )
    )
    no_caches = hv_site.load(direct)
    assert not no_caches.caches
    assert plan.estimated_seconds(no_caches, files, "lzma")[0] == pytest.approx(seconds, rel=1e-6)
    assert plan.estimated_seconds(site, [], "lzma") is None
    (tmp_path / "results" / "bench").mkdir(parents=True)
    (tmp_path / "results" / "bench" / "analysis.json").write_text("{not json")
    cwd = Path.cwd()
    try:
        import os

        os.chdir(tmp_path)
        assert plan.estimated_seconds(site, files, "lzma") is None
    finally:
        os.chdir(cwd)
