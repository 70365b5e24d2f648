"""``snakemake --report`` after a campaign shows it: the plots (the timeline and one per histogram of the output, from
the plots directory), the summary (throughput figures) and the failed-file table, each with its caption — in the zip
report as files, in the HTML report by name. Real Snakemake, local executor, on the campaign of conftest.py (a missing
and a corrupt file among five)."""

from __future__ import annotations

import csv
import zipfile

import uproot


def test_snakemake_report_shows_the_plots_the_summary_and_the_failed_files(campaign, snakemake):
    workdir, spec, missing, corrupt = campaign
    config = (f"dataset={workdir / 'spec.json'}", "campaign=r")
    done = snakemake(workdir, *config)
    assert done.returncode == 0, done.stderr[-3000:]
    out = workdir / "results" / "r"

    made = snakemake(workdir, *config, extra=("--report", str(workdir / "report.zip")))
    assert made.returncode == 0, made.stderr[-3000:]
    with zipfile.ZipFile(workdir / "report.zip") as z:
        # report/report.html and report/data/raw/<id>/<file> for each result marked for the report
        results = {name.rsplit("/", 1)[1]: z.read(name) for name in z.namelist() if "/data/raw/" in name}
        page = z.read("report/report.html").decode()
    with uproot.open(out / "histograms.root") as f:
        plots = {f"{name}.png" for name in f.keys(cycle=False)} | {"timeline.png"}
    assert len(plots) > 20 and {p.name for p in (out / "plots").glob("*.png")} == plots
    assert set(results) == plots | {"summary.html", "failures.tsv"}
    assert all(results[name] == (out / "plots" / name).read_bytes() for name in plots)

    summary = results["summary.html"].decode()
    assert "INCOMPLETE" in summary and "3 of 5" in summary and "9,000" in summary and "Hz" in summary
    rows = {row["path"]: row for row in csv.DictReader(results["failures.tsv"].decode().splitlines(), delimiter="\t")}
    assert set(rows) == {missing, str(corrupt)}
    files = spec["ttbar"]["nominal"]["files"]
    for path, kind in ((missing, "missing-file"), (str(corrupt), "not-root")):
        row = rows[path]
        assert row["fid"] == f"ttbar/nominal/{[f['path'] for f in files].index(path)}"
        assert row["rule"] == "analyse" and (workdir / row["output"]).exists()
        assert row["class"] == "permanent" and row["kind"] == kind and path in row["cause"] and row["fix"]
    assert "No such file" in rows[missing]["cause"]
    # The captions (workflows/report/*.rst) are rendered into the report, with the campaign's config.
    assert "The failed files of campaign" in page and "The campaign's plots" in page
    assert "the data rate and the file tasks running" in page and "The outcome of campaign" in page

    html = snakemake(workdir, *config, extra=("--report", str(workdir / "report.html")))
    assert html.returncode == 0, html.stderr[-3000:]
    page = (workdir / "report.html").read_text()
    assert all(name in page for name in plots | {"summary.html", "failures.tsv"})
    # Making the report runs no job and leaves the campaign up to date (the run's record is not rewritten).
    again = snakemake(workdir, *config, extra=("-n",))
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, again.stdout[-3000:]
