"""The campaign workflow end to end with Snakemake's local executor on generated files: every file counted once,
a corrupt and a missing file reported (the rest completes), the merged histograms equal the per-file sum, a rerun
retries only what failed, and a bad spec fails before any task starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import uproot

from hepvine import analysis, generate

REPO = Path(__file__).resolve().parents[2]


def snakemake(workdir: Path, *config: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--cores", "2", "--config", *config]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.fixture
def campaign(tmp_path):
    data = tmp_path / "data"
    spec = generate.generate(data, {"ttbar": 2, "data": 1}, 3000, seed=3)
    missing = str(data / "ttbar" / "ttbar_0002.root")
    corrupt = data / "ttbar" / "corrupt.root"
    corrupt.write_bytes(np.random.default_rng(0).bytes(5000))
    spec["ttbar"]["nominal"]["files"] += [{"path": missing, "nevts": 3000}, {"path": str(corrupt), "nevts": 3000}]
    spec["ttbar"]["nominal"]["nevts_total"] += 6000
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    return tmp_path, spec, missing, corrupt


def test_campaign_counts_every_file_once_and_reports_failures(campaign):
    workdir, spec, missing, corrupt = campaign
    done = snakemake(workdir, f"dataset={workdir / 'spec.json'}", "campaign=t", "merge_fan_in=2")
    assert done.returncode == 0, done.stderr[-3000:]
    out = workdir / "results" / "t"
    report = json.loads((out / "report.json").read_text())
    assert report["complete"] is False
    assert report["files"] == {"total": 5, "ok": 3, "failed": 2}
    failed = {f["path"]: f["error"] for f in report["failed_files"]}
    assert set(failed) == {missing, str(corrupt)}
    assert "FileNotFoundError" in failed[missing] or "No such file" in failed[missing]
    assert report["events"] == 9000 and report["bytes_read"] > 0
    assert 1 <= report["cores"] <= 2  # --cores 2
    summary = done.stdout + done.stderr  # the summary printed at the end of the run
    assert "hepvine campaign results/t: 3/5 files ok, 9,000 events" in summary and "INCOMPLETE" in summary
    assert f"FAILED {missing}" in summary

    # One plot per region of the analysis (the workflow lists them without importing it) and the timeline.
    plots = {p.name: matplotlib.image.imread(p) for p in (out / "plots").glob("*.png")}
    assert set(plots) == {f"{region}.png" for region in analysis.REGIONS} | {"timeline.png"}
    assert all(img.shape[0] > 300 and img.shape[1] > 300 and img.std() > 0.01 for img in plots.values())

    # The merged histograms are the sum over the good files, computed here file by file.
    expected = analysis.new_histogram()
    for process in ("ttbar", "data"):
        xsec = spec[process].get("xsec")
        total = spec[process]["nominal"]["nevts_total"]
        for entry in spec[process]["nominal"]["files"][:2 if process == "ttbar" else 1]:
            events = uproot.open(entry["path"])["Events"].arrays(analysis.BRANCHES)
            analysis.fill(expected, events, process, analysis.event_weight(xsec, 3378, total))
    with uproot.open(out / "histograms.root") as f:
        for region in analysis.REGIONS:
            for process in ("ttbar", "data"):
                for variation in analysis.VARIATIONS:
                    th1 = f[f"{region}_{process}_{variation}"]
                    want = expected[{"region": region, "process": process, "variation": variation}]
                    np.testing.assert_allclose(th1.values(), want.values(), rtol=1e-12)

    # Repair both files: a rerun analyses only those two again, and the campaign is complete.
    good = {r["name"] for r in report["inputs"] if not r["error"]}
    kept = {p: p.stat().st_mtime_ns for p in (out / "files").glob("*.pkl") if p.stem in good}
    assert len(kept) == 3
    assert json.loads((out / "retries.json").read_text()) == {"ttbar__nominal__00002": 1, "ttbar__nominal__00003": 1}
    generate.write_file(Path(missing), "ttbar", 3000, index=2, seed=3)
    generate.write_file(corrupt, "ttbar", 3000, index=3, seed=3)
    again = snakemake(workdir, f"dataset={workdir / 'spec.json'}", "campaign=t", "merge_fan_in=2")
    assert again.returncode == 0, again.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["files"] == {"total": 5, "ok": 5, "failed": 0}, report["failed_files"]
    assert report["complete"] is True and report["events"] == 15000
    assert {p: p.stat().st_mtime_ns for p in kept} == kept, "a file that had succeeded was analysed again"


def test_recompressed_campaign_gives_the_same_histograms(campaign):
    workdir, spec, missing, corrupt = campaign
    spec_arg = f"dataset={workdir / 'spec.json'}"
    plain = snakemake(workdir, spec_arg, "campaign=plain")
    zstd = snakemake(workdir, spec_arg, "campaign=zstd", "recompress=zstd:5")
    assert plain.returncode == 0 and zstd.returncode == 0, zstd.stderr[-3000:]
    report = json.loads((workdir / "results/zstd/report.json").read_text())
    assert report["files"] == {"total": 5, "ok": 3, "failed": 2}
    causes = {f["path"]: f["error"] for f in report["failed_files"]}
    assert missing in causes[missing] and str(corrupt) in causes[str(corrupt)]  # each cause names its file
    assert all("recompressed" in r["read_from"] for r in report["inputs"])
    copied = json.loads((workdir / "results/zstd/dataset.zstd.json").read_text())
    first = copied["ttbar"]["nominal"]["files"][0]
    assert first["source"] == spec["ttbar"]["nominal"]["files"][0]["path"]
    assert first["path"].endswith("recompressed/ttbar__nominal__00000.root")
    with uproot.open(workdir / "results/plain/histograms.root") as a, \
            uproot.open(workdir / "results/zstd/histograms.root") as b:
        assert set(a.keys()) == set(b.keys()) and len(a.keys()) == 8  # 2 regions x 2 processes x 2 variations
        for name in a.keys():
            np.testing.assert_array_equal(a[name].values(), b[name].values())


def test_bad_spec_fails_before_any_task(tmp_path):
    (tmp_path / "spec.json").write_text(json.dumps({"ttbar": {"nominal": {"nevts_total": -1, "files": []}}}))
    done = snakemake(tmp_path, f"dataset={tmp_path / 'spec.json'}", "campaign=bad")
    assert done.returncode != 0
    assert "ttbar/nominal/nevts_total: must be a positive integer" in done.stderr
    assert "ttbar/nominal/files: must be a non-empty list" in done.stderr
    assert not (tmp_path / "results").exists()
