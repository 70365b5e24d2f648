"""The campaign workflow end to end with Snakemake's local executor on generated files: every file counted once,
a corrupt and a missing file reported as permanent failures (the rest completes), the merged histograms (output.coffea
and histograms.root, from the default analysis, hepvine.examples.agc:TtbarProcessor) equal the per-file sum and their
event counts equal the records', each histogram has its plot, reruns retry exactly what failed (transient failures by
themselves, permanent ones by the same command once their files are replaced or restored), and a bad spec fails
before any task starts. (The campaign and the snakemake runner are fixtures of conftest.py.)"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import matplotlib.image
import numpy as np
import uproot
from coffea.util import load
from kept import generated_dataset, generated_file

from hepvine.examples import agc as analysis
from hepvine.routing import index


def results_of(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in (out / "files").rglob("*.pkl")}


def test_campaign_counts_every_file_once_and_reports_failures(campaign, snakemake):
    workdir, spec, missing, corrupt = campaign
    config = (f"dataset={workdir / 'spec.json'}", "campaign=t", "merge_fan_in=2", "files_per_job=1")
    done = snakemake(workdir, *config)
    assert done.returncode == 0, done.stderr[-3000:]
    out = workdir / "results" / "t"
    report = json.loads((out / "report.json").read_text())
    assert report["complete"] is False
    assert report["files"] == {"total": 5, "ok": 3, "failed": 2}
    assert report["accounting"] == {"expected": 5, "records": 5, "missing": [], "duplicated": [], "unexpected": []}
    failed = {f["path"]: f for f in report["failed_files"]}
    assert set(failed) == {missing, str(corrupt)}
    assert failed[missing]["kind"] == "missing-file" and "No such file" in failed[missing]["error"]
    assert failed[str(corrupt)]["kind"] == "not-root" and str(corrupt) in failed[str(corrupt)]["error"]
    assert {f["class"] for f in failed.values()} == {"permanent"}
    assert all("run the same command again" in f["fix"] and (workdir / f["output"]).exists() for f in failed.values())
    assert report["events"] == 9000 and report["bytes_read"] > 0
    assert 1 <= report["cores"] <= 2  # --cores 2
    summary = done.stdout + done.stderr  # the summary printed at the end of the run
    assert "hepvine campaign results/t: 3/5 files ok, 9,000 events" in summary and "INCOMPLETE" in summary
    assert f"FAILED (permanent) {missing}" in summary and "2 permanent failure(s)" in summary

    # One plot per histogram of the output (named by its path) and the timeline.
    with uproot.open(out / "histograms.root") as f:
        names = set(f.keys(cycle=False))
    assert set(report["histograms"]["written"]) == names and report["histograms"]["skipped"] == {}
    plots = {p.name: matplotlib.image.imread(p) for p in (out / "plots").glob("*.png")}
    assert set(plots) == {f"{name}.png" for name in names} | {"timeline.png"}
    assert all(img.shape[0] > 300 and img.shape[1] > 300 and img.std() > 0.01 for img in plots.values())

    # The merged histograms are the sum over the good files, computed here file by file; the events_* TH1s hold
    # the events of the ok records, exactly.
    expected = analysis.new_histogram()
    for process in ("ttbar", "data"):
        xsec = spec[process].get("xsec")
        total = spec[process]["nominal"]["nevts_total"]
        for entry in spec[process]["nominal"]["files"][: 2 if process == "ttbar" else 1]:
            events = uproot.open(entry["path"])["Events"].arrays(analysis.BRANCHES)
            analysis.fill(expected, events, process, analysis.event_weight(xsec, 3378, total), data=xsec is None)
    with uproot.open(out / "histograms.root") as f:
        for region in analysis.REGIONS:
            for process in ("ttbar", "data"):
                for variation in analysis.variations(process, "nominal", data=process == "data"):
                    th1 = f[f"{region}_{process}_{variation}"]
                    want = expected[{"region": region, "process": process, "variation": variation}]
                    np.testing.assert_allclose(th1.values(), want.values(), rtol=1e-12)
        assert f["events_ttbar_nominal"].values().sum() == 6000 and f["events_data_nominal"].values().sum() == 3000
        assert sum(r["events"] for r in report["inputs"] if r["failure"] is None) == 9000
        # output.coffea holds the same histograms (coffea.util.load reads it), and the report the events per dataset.
        output = load(str(out / "output.coffea"))
        assert set(output) == names
        for name in names:
            np.testing.assert_array_equal(output[name].values(flow=True), f[name].values(flow=True))
    assert report["events_per_dataset"] == {"data__nominal": 3000, "ttbar__nominal": 6000}

    # Permanent failures are counted with what identified their source (missing; size and mtime), not retried by
    # themselves: the same command again runs nothing.
    corrupt_stat = corrupt.stat()
    assert json.loads((out / "retries.json").read_text())["files"] == {
        "ttbar/nominal/2": {"transient": 0, "permanent": 1, "path": missing, "failed_source": "missing"},
        "ttbar/nominal/3": {
            "transient": 0,
            "permanent": 1,
            "path": str(corrupt),
            "failed_source": f"{corrupt_stat.st_size}:{corrupt_stat.st_mtime_ns}",
        },
    }
    before = results_of(out)
    same = snakemake(workdir, *config)
    assert same.returncode == 0 and results_of(out) == before, "a permanent failure was retried by itself"

    # Repair both files on disk (restore the missing one, replace the corrupt one) and run the same command, as the
    # report says: only those two are analysed again, and the campaign is complete and exact.
    generated_file(Path(missing), "ttbar", 3000, index=2, seed=3)
    generated_file(corrupt, "ttbar", 3000, index=3, seed=3)
    forced = [f["output"] for f in report["failed_files"]]
    again = snakemake(workdir, *config)
    assert again.returncode == 0, again.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["files"] == {"total": 5, "ok": 5, "failed": 0}, report["failed_files"]
    assert report["complete"] is True and report["events"] == 15000
    after = results_of(out)
    changed = {name for name in after if after[name] != before[name]}
    assert changed == {str(Path(o).relative_to("results/t")) for o in forced}
    # Fixed and done: the same command once more runs nothing.
    done_again = results_of(out)
    assert snakemake(workdir, *config).returncode == 0 and results_of(out) == done_again


def with_a_server_down(tmp_path: Path, processes: dict, seed: int, campaign: str) -> tuple[tuple, dict]:
    """(config, environment) of a campaign of generated PROCESSES in TMP_PATH/spec.json, one job a file, plus a ttbar
    file at an XRootD server that is down (a port nothing listens on; the client gives up within seconds)."""
    spec = generated_dataset(tmp_path / "data", processes, 2000, seed=seed)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec["ttbar"]["nominal"]["files"].append({"path": f"root://127.0.0.1:{port}//store/down.root", "nevts": 2000})
    spec["ttbar"]["nominal"]["nevts_total"] += 2000
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    config = (
        f"dataset={tmp_path / 'spec.json'}",
        f"campaign={campaign}",
        "files_per_job=1",
        "read_attempts=2",
        "read_backoff_s=0.1",
    )
    return config, dict(os.environ, XRD_CONNECTIONRETRY="1", XRD_CONNECTIONWINDOW="2", XRD_REQUESTTIMEOUT="5")


def test_transient_failure_is_retried_by_running_the_same_command(tmp_path, snakemake):
    """A file at an XRootD server that is down fails as transient; the same command again reruns exactly its job."""
    config, env = with_a_server_down(tmp_path, {"ttbar": 2}, 4, "tr")
    first = snakemake(tmp_path, *config, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    out = tmp_path / "results" / "tr"
    report = json.loads((out / "report.json").read_text())
    (failure,) = report["failed_files"]
    assert failure["class"] == "transient" and failure["kind"] == "unreachable", failure
    assert "in 2 round(s)" in failure["error"]
    assert "run the same command again" in first.stdout + first.stderr
    before = results_of(out)
    again = snakemake(tmp_path, *config, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    after = results_of(out)
    assert {name for name in after if after[name] != before[name]} == {
        str(Path(failure["output"]).relative_to("results/tr"))
    }
    assert json.loads((out / "retries.json").read_text())["files"] == {
        "ttbar/nominal/2": {"transient": 2, "permanent": 0}
    }


def test_a_transient_failure_of_a_run_that_ends_in_an_error_is_retried_by_the_same_command(tmp_path, snakemake):
    """A run that ends in an error (here one job cannot write its result) makes no report; the transient failure that
    another of its jobs recorded is counted all the same (from that job's result), so the same command again retries
    it with the failed job, and runs nothing else."""
    config, env = with_a_server_down(tmp_path, {"ttbar": 1, "data": 1}, 5, "er")
    out = tmp_path / "results" / "er"
    data_result = f"files/{index.batch_id('data', 'nominal', index.NO_CACHE, 0)}.pkl"
    unwritable = (out / data_result).parent
    unwritable.mkdir(parents=True)
    unwritable.chmod(0o500)  # the data job cannot write its result: that job fails (as the non-root user make test is)
    first = snakemake(tmp_path, *config, extra=("--keep-going",), env=env)
    assert first.returncode != 0 and not (out / "report.json").exists(), first.stderr[-3000:]
    assert json.loads((out / "retries.json").read_text())["files"] == {
        "ttbar/nominal/1": {"transient": 1, "permanent": 0}
    }
    assert "run the same command again, which retries the transient ones" in first.stderr
    if unwritable.exists():  # (Snakemake removes a failed job's empty output directory)
        unwritable.chmod(0o700)
    before = results_of(out)
    again = snakemake(tmp_path, *config, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    (failure,) = report["failed_files"]
    assert failure["fid"] == "ttbar/nominal/1" and failure["class"] == "transient", failure
    after = results_of(out)
    assert data_result not in before
    assert {name for name in after if after.get(name) != before.get(name)} == {
        data_result,
        str(Path(failure["output"]).relative_to("results/er")),
    }
    assert json.loads((out / "retries.json").read_text())["files"] == {
        "ttbar/nominal/1": {"transient": 2, "permanent": 0}
    }


def test_recompressed_campaign_gives_the_same_histograms(campaign, snakemake):
    workdir, spec, missing, corrupt = campaign
    spec_arg = f"dataset={workdir / 'spec.json'}"
    plain = snakemake(workdir, spec_arg, "campaign=plain")
    zstd = snakemake(workdir, spec_arg, "campaign=zstd", "recompress=zstd:5")
    assert plain.returncode == 0 and zstd.returncode == 0, zstd.stderr[-3000:]
    report = json.loads((workdir / "results/zstd/report.json").read_text())
    assert report["files"] == {"total": 5, "ok": 3, "failed": 2}
    causes = {f["path"]: f["error"] for f in report["failed_files"]}
    assert missing in causes[missing] and str(corrupt) in causes[str(corrupt)]  # each cause names its file
    ok = [r for r in report["inputs"] if r["failure"] is None]
    assert all("recompressed" in r["read_from"] and r["recompress"]["codec"] == "zstd:5" for r in ok)
    assert all(r["recompress"]["engine"] == "transcode" for r in ok), ok  # basket by basket, not hadd
    assert not list((workdir / "results/zstd/recompressed").rglob("*.tmp")), "a temporary file was left behind"
    copied = json.loads((workdir / "results/zstd/dataset.zstd.json").read_text())
    first = copied["ttbar"]["nominal"]["files"][0]
    assert first["source"] == spec["ttbar"]["nominal"]["files"][0]["path"]
    # By its absolute path: a later campaign's jobs find it wherever they run (not only in this directory).
    assert first["path"] == str(workdir / "results/zstd/recompressed/ttbar/nominal/direct/000/000/0.root")
    assert Path(first["path"]).exists()
    assert copied["ttbar"]["nominal"]["files"][2] == {"path": missing, "nevts": 3000}  # not copied: kept as it was
    with (
        uproot.open(workdir / "results/plain/histograms.root") as a,
        uproot.open(workdir / "results/zstd/histograms.root") as b,
    ):
        # each region has data's nominal and every variation the ttbar nominal sample fills (the AGC's), and the
        # event counts of the 2 processes
        filled = {
            "data": analysis.variations("data", "nominal", data=True),
            "ttbar": analysis.variations("ttbar", "nominal", data=False),
        }
        expected = {
            f"{region}_{process}_{variation};1"
            for region in analysis.REGIONS
            for process, names in filled.items()
            for variation in names
        }
        assert len(expected) == 2 * (1 + 10)
        assert {k for k in a.keys() if not k.startswith("events_")} == expected
        assert set(a.keys()) == set(b.keys()) and len(a.keys()) == len(expected) + 2
        for name in a.keys():
            np.testing.assert_array_equal(a[name].values(), b[name].values())


def test_bad_spec_fails_before_any_task(tmp_path, snakemake):
    (tmp_path / "spec.json").write_text(json.dumps({"ttbar": {"nominal": {"nevts_total": -1, "files": []}}}))
    done = snakemake(tmp_path, f"dataset={tmp_path / 'spec.json'}", "campaign=bad")
    assert done.returncode != 0
    assert "ttbar/nominal/nevts_total: must be a positive integer" in done.stderr
    assert "ttbar/nominal/files: must be a non-empty list" in done.stderr
    assert not (tmp_path / "results").exists()


def test_colliding_names_and_a_path_listed_twice(tmp_path, snakemake):
    """Process a_b/variation c and process a/variation b_c are two files (they once shared a task name) and two
    datasets (events.metadata["dataset"], counted apart); a__b/c and a/b__c, whose coffea dataset names
    (<process>__<variation>) would meet, are refused before any job, naming both; a path listed under two processes
    is refused likewise."""
    data = tmp_path / "data"
    files = [generated_file(data / f"f{i}.root", "ttbar", 1000, index=i, seed=6)["path"] for i in range(2)]
    spec = {
        "a_b": {"xsec": 1.0, "c": {"nevts_total": 1000, "files": [{"path": str(files[0]), "nevts": 1000}]}},
        "a": {"xsec": 1.0, "b_c": {"nevts_total": 1000, "files": [{"path": str(files[1]), "nevts": 1000}]}},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = snakemake(tmp_path, f"dataset={tmp_path / 'spec.json'}", "campaign=c")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "results/c/report.json").read_text())
    assert report["complete"] and sorted(r["fid"] for r in report["inputs"]) == ["a/b_c/0", "a_b/c/0"]
    assert report["events"] == 2000
    assert report["events_per_dataset"] == {"a__b_c": 1000, "a_b__c": 1000}, report["events_per_dataset"]

    meet = {"a__b": spec["a_b"], "a": {"xsec": 1.0, "b__c": spec["a"]["b_c"]}}
    (tmp_path / "spec.json").write_text(json.dumps(meet))
    refused = snakemake(tmp_path, f"dataset={tmp_path / 'spec.json'}", "campaign=e")
    assert refused.returncode != 0 and not (tmp_path / "results" / "e").exists()
    assert "a/b__c: its coffea dataset name a__b__c (<process>__<variation>) is also a__b/c's" in refused.stderr

    spec = {"a__b": spec["a_b"], "a": {"xsec": 1.0, "b_c": spec["a"]["b_c"]}}
    spec["a"]["b_c"]["files"][0]["path"] = str(files[0])
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    twice = snakemake(tmp_path, f"dataset={tmp_path / 'spec.json'}", "campaign=d")
    assert twice.returncode != 0
    assert f"a/b_c/files[0]/path: {files[0]} is listed twice, here and at a__b/c/files[0]" in twice.stderr
    assert not (tmp_path / "results" / "d").exists()
