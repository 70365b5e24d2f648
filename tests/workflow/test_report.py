"""The report's arithmetic and accounting: cores are the most file tasks that ran at once; rates follow from events
and bytes; records are reconciled with the spec (missing, duplicated, unexpected files make it incomplete); every
histogram of the analysis's output goes to histograms.root under its path, empty ones too, and those ROOT cannot hold
are listed with why; the merged events must equal the ok records' or no report is written; retries count failures by
class, once per report."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import hist
import numpy as np
import pytest
import uproot

from hepvine.examples import agc as analysis
from hepvine.jobs import merge
from hepvine.model import atomic
from hepvine.model.records import PERMANENT, TRANSIENT, Failure, FileRecord
from hepvine.products import output, plots, report, retries
from hepvine.products.summary import process_age_s, summary_line


def record(name, start, end, events=100, nbytes=1000, failure=None):
    return FileRecord(
        fid=f"ttbar/nominal/{name}",
        path=f"/store/{name}.root",
        process="ttbar",
        variation="nominal",
        batch="ttbar/nominal/direct/000/000",
        start=start,
        end=end,
        events=events,
        bytes_read=nbytes,
        failure=failure,
    ).to_dict()


def expected(*names):
    return [(f"ttbar/nominal/{n}", f"/store/{n}.root", "ttbar/nominal/direct/000/000") for n in names]


GONE = Failure("unreachable", TRANSIENT, "FetchError: gone", "run the same command again")


def test_cores_are_peak_concurrency_and_rates_use_campaign_wall_time():
    records = [record("a", 0, 10), record("b", 5, 15), record("c", 9, 12), record("d", 15, 20, failure=GONE)]
    summary = report.summarise(records, expected("a", "b", "c", "d"), "results/x")
    assert summary["cores"] == 3  # a, b and c overlap between 9 and 10
    assert summary["wall_seconds"] == 20
    assert summary["events"] == 300 and summary["bytes_read"] == 3000
    assert summary["event_rate_hz"] == 15.0 and summary["event_rate_per_core_hz"] == 5.0
    assert summary["complete"] is False
    assert summary["failed_files"] == [
        {
            "fid": "ttbar/nominal/d",
            "path": "/store/d.root",
            "class": "transient",
            "kind": "unreachable",
            "error": "FetchError: gone",
            "fix": "run the same command again",
            "output": "results/x/files/ttbar/nominal/direct/000/000.pkl",
        }
    ]
    assert [r["fid"] for r in summary["inputs"]] == [f"ttbar/nominal/{n}" for n in "abcd"]


@pytest.mark.parametrize(
    "records, spec, what",
    [
        (["a"], ["a", "b"], "missing"),
        (["a", "b", "b"], ["a", "b"], "duplicated"),
        (["a", "b", "z"], ["a", "b"], "unexpected"),
    ],
)
def test_records_that_do_not_match_the_spec_make_the_report_incomplete(records, spec, what):
    summary = report.summarise([record(n, 0, 1) for n in records], expected(*spec))
    assert summary["complete"] is False and not summary["failed_files"]
    assert summary["accounting"][what] and summary["files"]["total"] == len(spec)
    assert "ACCOUNTING" in summary_line(summary, "results/x")


def test_complete_only_when_every_file_has_one_ok_record():
    assert report.summarise([record("a", 0, 1), record("b", 0, 1)], expected("a", "b"))["complete"] is True


def test_files_that_ran_two_versions_of_the_analysis_make_the_report_incomplete_with_the_fix():
    """The analysis changed while the campaign ran (``hepvine.model.sources.version`` in each record): the report
    counts the versions, is incomplete, and its summary says so and what to do; one version (or records of an older
    hepvine, without one) is complete."""
    versions = {"a": "1111aaaa2222bbbb", "b": "1111aaaa2222bbbb", "c": "3333cccc4444dddd"}
    records = [{**record(n, 0, 1), "analysis": v} for n, v in versions.items()]
    summary = report.summarise(records, expected(*versions))
    assert summary["complete"] is False and not summary["failed_files"]
    assert summary["analysis_versions"] == {"1111aaaa2222bbbb": 2, "3333cccc4444dddd": 1}
    text = summary_line(summary, "results/x")
    assert "ANALYSIS CHANGED while the campaign ran: its files ran 2 versions of the analysis" in text
    assert "1111aaaa2222bbbb: 2 file(s), 3333cccc4444dddd: 1 file(s)" in text
    assert "touch its file and run the same command again" in text and "INCOMPLETE" in text
    one = report.summarise(records[:2] + [record("c", 0, 1)], expected(*versions))
    assert one["complete"] is True and one["analysis_versions"] == {"1111aaaa2222bbbb": 2}
    assert "ANALYSIS CHANGED" not in summary_line(one, "results/x")


def test_every_histogram_of_the_output_goes_to_histograms_root_under_its_path(tmp_path):
    """The AGC processor's flat output keeps today's TH1 names (empty ones too, and the one-bin event counts); a
    nested output's histograms go under their path; what ROOT cannot hold (category axes) is listed with why."""
    h = analysis.new_histogram()
    h.fill(region="4j1b", process="ttbar", variation="nominal", observable=[100.0, 200.0], weight=[1.0, 1.0])
    flat = {
        f"{region}_{process}_{variation}": h[{"region": region, "process": process, "variation": variation}]
        if process in h.axes["process"]
        else hist.Hist(h.axes["observable"], storage=hist.storage.Weight())
        for region in analysis.REGIONS
        for process in ("quiet", "ttbar")
        for variation in analysis.variations(process, "nominal", data=False)
    }
    events = {
        "events_ttbar_nominal": analysis.events_histogram(7),
        "events_quiet_nominal": analysis.events_histogram(3),
    }
    two_d = hist.Hist(hist.axis.Regular(4, 0, 4, name="x"), hist.axis.Regular(2, 0, 2, name="y"))
    two_d.fill(x=[0.5, 3.5], y=[1.5, 1.5])
    by_region = h[{"process": "ttbar", "variation": "nominal"}]  # region (a category) x observable
    result = {**flat, **events, "nested": {"a b": two_d, "count": 12}, "categories": by_region, "all": h}
    path = tmp_path / "h.root"
    written = output.write_root(result, path)
    assert sorted(written["written"]) == sorted([*flat, *events, "nested/a_b"])
    assert sorted(written["skipped"]) == ["all", "categories"]
    assert "category axis 'region'" in written["skipped"]["categories"] and "4 axes" in written["skipped"]["all"]
    with uproot.open(path) as f:
        for region in analysis.REGIONS:
            for variation in analysis.variations("quiet", "nominal", data=False):
                assert f[f"{region}_quiet_{variation}"].values().sum() == 0  # no selected event: an empty TH1
        assert f["4j1b_ttbar_nominal"].values().sum() == 2 and f["4j2b_ttbar_nominal"].values().sum() == 0
        assert f["events_ttbar_nominal"].values().sum() + f["events_quiet_nominal"].values().sum() == 10
        assert f["nested/a_b"].classname.startswith("TH2") and f["nested/a_b"].values().sum() == 2
        assert "categories" not in f and "all" not in f


@pytest.mark.parametrize("storage", ["Int64", "AtomicInt64"])
def test_a_histogram_of_integer_counts_goes_to_histograms_root_as_doubles(tmp_path, storage):
    """Integer counts (``Int64``, ``AtomicInt64`` storage: what ``hist.Hist.new...Int64()`` makes), which uproot
    cannot write, are written as TH1D/TH2D of the same counts, flow bins too."""
    one = hist.Hist(hist.axis.Regular(4, 0, 4, name="x", label="x [GeV]"), storage=getattr(hist.storage, storage)())
    two = hist.Hist(
        hist.axis.Regular(4, 0, 4, name="x"), hist.axis.Variable([0, 1, 3], name="y"), storage=hist.storage.Int64()
    )
    one.fill(x=[-1.0, 0.5, 1.5, 1.5, 9.0])
    two.fill(x=[0.5, 3.5, 3.5], y=[0.5, 2.5, 7.0])
    path = tmp_path / "h.root"
    assert output.write_root({"one": one, "d": {"two": two}}, path) == {"written": ["one", "d/two"], "skipped": {}}
    with uproot.open(path) as f:
        assert f["one"].classname == "TH1D" and f["d/two"].classname == "TH2D"
        assert f["one"].values(flow=True).tolist() == [1, 1, 2, 0, 0, 1]
        assert f["d/two"].values(flow=True).tolist() == two.values(flow=True).tolist()
        assert f["one"].member("fXaxis").member("fTitle") == "x [GeV]"


def test_an_axis_without_flow_bins_loses_no_other_axis_flow_in_histograms_root(tmp_path):
    """uproot writes a histogram's flow bins only when each axis has both, and zeroes them all otherwise: an axis
    without an underflow (or overflow) bin is given an empty one, and every bin the histogram has is written."""
    no_under = hist.Hist(hist.axis.Regular(4, 0, 4, name="pt", underflow=False), storage=hist.storage.Weight())
    no_under.fill(pt=[0.5, 9.0, 9.0], weight=[1.0, 2.0, 3.0])
    two = hist.Hist(hist.axis.Regular(2, 0, 2, name="x", overflow=False), hist.axis.Integer(0, 2, name="n"))
    two.fill(x=[-1.0, 0.5], n=[5, 1])
    assert output.write_root({"no_under": no_under, "two": two}, tmp_path / "h.root")["written"] == ["no_under", "two"]
    with uproot.open(tmp_path / "h.root") as f:
        assert f["no_under"].values(flow=True).tolist() == [0, 1, 0, 0, 0, 5]
        assert f["no_under"].variances(flow=True).tolist() == [0, 1, 0, 0, 0, 13]
        assert f["no_under"].axis().edges().tolist() == [0, 1, 2, 3, 4]
        written = f["two"].values(flow=True)
    assert written[:3].tolist() == two.values(flow=True).tolist() and written[3].sum() == 0 and written.sum() == 2


def test_every_histogram_in_lists_tuples_and_other_mappings_is_written_and_none_hides_another(tmp_path):
    """Histograms in a list, a tuple, a mapping that is no dict, and boost-histogram's own are written under their
    path (an item's index); two whose paths in ROOT's characters are one (``m jj``, ``m_jj``) are not both written as
    cycles of one name, where a plain read gives one: the second is listed as skipped, with why."""
    from types import MappingProxyType

    import boost_histogram

    def filled(x: float) -> hist.Hist:
        h = hist.Hist(hist.axis.Regular(2, 0, 2, name="x"))
        h.fill(x=[x])
        return h

    plain = boost_histogram.Histogram(boost_histogram.axis.Regular(2, 0, 2))
    plain.fill([1.5, 1.5])
    result = {"jets": [filled(0.5), (filled(1.5),)], "view": MappingProxyType({"h": filled(0.5)}), "bh": plain}
    result |= {"m jj": filled(0.5), "m_jj": filled(1.5)}
    written = output.write_root(result, tmp_path / "h.root")
    assert written["written"] == ["jets/0", "jets/1/0", "view/h", "bh", "m_jj"]
    assert list(written["skipped"]) == ["m_jj (again)"]
    assert "is another histogram's too" in written["skipped"]["m_jj (again)"]
    with uproot.open(tmp_path / "h.root") as f:
        assert f["jets/1/0"].values().tolist() == [0, 1] and f["bh"].values().tolist() == [0, 2]
        assert f["m_jj"].values().tolist() == [1, 0] and f.keys(cycle=True).count("m_jj;1") == 1
        assert "m_jj;2" not in f.keys(cycle=True)


def test_a_histogram_uproot_cannot_write_is_skipped_with_its_reason_and_the_others_are_written(tmp_path):
    """A report never loses its products to one histogram uproot refuses (a 2-D profile: ``Mean`` storage, which
    uproot 5.7 writes in 1-D only): it is listed in ``skipped`` with uproot's reason, and the others are written."""
    fine = hist.Hist(hist.axis.Regular(2, 0, 2, name="x"))
    profile = hist.Hist(hist.axis.Regular(2, 0, 2, name="x"), hist.axis.Regular(2, 0, 2), storage=hist.storage.Mean())
    profile.fill([0.5], [0.5], sample=[3.0])
    written = output.write_root({"fine": fine, "d": {"profile": profile}}, tmp_path / "h.root")
    assert written["written"] == ["fine"] and list(written["skipped"]) == ["d/profile"]
    assert written["skipped"]["d/profile"].startswith("uproot cannot write it (NotImplementedError: ")
    with uproot.open(tmp_path / "h.root") as f:
        assert f["fine"].classname == "TH1D" and f.keys(cycle=False) == ["fine"]  # no empty directory "d"


def report_argv(where, events: int, histograms: int = 1) -> list[str]:
    """The report's command line over two batches' results (written in WHERE) of 100 events each as the records
    say, their event counts EVENTS in all, each output HISTOGRAMS histograms, its products into WHERE/out."""
    results = [where / "a.pkl", where / "b.pkl"]
    for path, name, n in zip(results, "ab", (100, events - 100)):
        output_ = {f"ttbar_nominal{'_' * i}": analysis.events_histogram(100) for i in range(histograms)}
        atomic.write_pickle(path, {"records": [record(name, 0, 1)], "output": output_, "events": {"ttbar__nominal": n}})
    (where / "expected.json").write_text(json.dumps({"files": [list(e) for e in expected("a", "b")]}))
    out = where / "out"
    return [
        "--results",
        *map(str, results),
        "--expected",
        str(where / "expected.json"),
        "--analysis",
        "hepvine.examples.agc:TtbarProcessor",
        "--output",
        str(out / "output.coffea"),
        "--histograms",
        str(out / "histograms.root"),
        "--report",
        str(out / "report.json"),
        "--summary",
        str(out / "summary.html"),
        "--failures",
        str(out / "failures.tsv"),
        "--plots",
        str(out / "plots"),
        "--plot-histograms",
    ]


@pytest.mark.parametrize("events, written", [(200, True), (201, False)])
def test_the_report_is_written_only_when_the_merged_events_equal_the_ok_records(tmp_path, events, written):
    """The report adds up the results of the merge tree's root (here two batches' results); their events per
    dataset must sum to the ok records' events, or the merge added them apart (a bug): ReportError and no product.
    When they agree: output.coffea holds the (postprocessed) sum, report.json lists the histograms written and
    skipped and the events per dataset, and the plots are drawn: the timeline and one per histogram."""
    argv = report_argv(tmp_path, events)
    out = tmp_path / "out"
    if not written:
        with pytest.raises(report.ReportError, match="count 201 events, the ok records 200"):
            report.main(argv)
        assert not out.exists() or not any(out.iterdir())
        return
    assert report.main(argv) == 0
    from coffea.util import load

    assert load(str(out / "output.coffea"))["ttbar_nominal"].values().sum() == 200
    result = json.loads((out / "report.json").read_text())
    assert result["histograms"] == {"written": ["ttbar_nominal"], "skipped": {}}
    assert result["events_per_dataset"] == {"ttbar__nominal": 200} and result["complete"] is True
    assert sorted(p.name for p in (out / "plots").iterdir()) == ["timeline.png", "ttbar_nominal.png"]


def test_the_report_on_the_login_node_forks_its_drawers_safely_and_draws_what_one_process_draws(tmp_path):
    """As the login node runs it (a job of 2 threads, its own interpreter): the report forks two drawing processes
    after the analysis's module, coffea and its postprocess — with no thread running (a fork that copies a running
    thread's locks is an error here) — and its plots are byte for byte those it draws in one process. Each
    figure's drawer is written beside it."""
    run = """import os, sys
from hepvine.products import plots, report
drawn = plots.histogram
def histogram(h, title, path):
    (path.parent / f"{path.name}.pid").write_text(str(os.getpid()))
    return drawn(h, title, path)
plots.histogram = histogram
sys.exit(report.main(sys.argv[1:]))
"""
    plots_of, drawers = {}, {}
    for processes in (1, 2):
        where = tmp_path / str(processes)
        where.mkdir()
        args = [sys.executable, "-W", "error::DeprecationWarning:multiprocessing.popen_fork", "-c", run]
        args += [*report_argv(where, 200, histograms=8), "--processes", str(processes)]
        env = {**os.environ, "OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}
        done = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0 and "not drawn" not in done.stderr, done.stderr[-3000:]
        plots = where / "out" / "plots"
        plots_of[processes] = {p.name: p.read_bytes() for p in plots.glob("*.png")}
        drawers[processes] = {p.read_text() for p in plots.glob("*.pid")}
    assert len(plots_of[1]) == 9 and "timeline.png" in plots_of[1] and plots_of[1] == plots_of[2]
    assert len(drawers[1]) == 1 and len(drawers[2]) == 2, drawers


def test_back_to_back_tasks_share_a_core():
    assert report.peak_concurrency([record("a", 0, 5), record("b", 5, 9)]) == 1


def test_timeline_keeps_every_byte_and_counts_running_tasks():
    records = [record("a", 100, 110, nbytes=8e9), record("b", 105, 115, nbytes=4e9), record("c", 115, 120, nbytes=0)]
    series = plots.timeline_series(records, bins=20)
    width = series["time"][1] - series["time"][0]
    assert series["time"][0] == 0 and series["time"][-1] == 20
    assert np.sum(series["gbps"]) * width * 1e9 / 8 == pytest.approx(12e9)
    assert series["running"].max() == pytest.approx(2)  # a and b overlap from 105 to 110
    assert series["gbps"][0] == pytest.approx(6.4)  # a alone: 8 GB over 10 s


def test_plots_drawn_by_two_processes_while_the_report_writes_are_those_one_draws(tmp_path):
    """drawing shares the figures among processes forked on entry, which draw while the body of the context runs:
    every histogram gets its plot (one line per category of a category axis, integer categories by value) and the
    records their timeline, byte for byte as one process draws them after the body, and one that has no default
    view (three numeric axes, here first) gets none. A figure that fails is left out and named with its error; the
    others are drawn and the drawing succeeds (the report's products do not depend on a plot)."""
    rng = np.random.default_rng(3)
    named = [("cube", hist.Hist.new.Reg(2, 0, 1).Reg(2, 0, 1).Reg(2, 0, 1).Double())]
    for i in range(8):
        h = hist.Hist.new.Reg(20, 0, 10, name="x").Weight()
        h.fill(x=rng.uniform(0, 10, 100 + i))
        named.append((f"region/h{i}", h))
    named.append(("by/category", hist.Hist.new.StrCat(["a", "b"], name="c").Reg(5, 0, 1, name="x").Double()))
    flavour = hist.Hist.new.IntCat([0, 4, 5], name="flavour").Reg(5, 0, 1, name="x").Double()
    flavour.fill(flavour=[5, 5, 0], x=[0.1, 0.2, 0.3])
    named.append(("by/flavour", flavour))
    records = [record("a", 100, 110, nbytes=8e9), record("b", 105, 120, nbytes=1e9)]
    (tmp_path / "named.pkl").write_bytes(pickle.dumps((named, records)))
    # In an interpreter of its own, as the report job is (this one has threads: a fork would copy their locks), with
    # the thread counts Snakemake gives a 2-thread job; a fork with threads running fails it. Each figure's drawer
    # is written beside it, and the body's own pid and when it ended.
    draw = """import os, pickle, sys, time
from pathlib import Path
from hepvine.products import plots
drawn, drawn_timeline = plots.histogram, plots.timeline
def histogram(h, title, path):
    if title == "fails":
        raise ValueError("this figure fails")
    (path.parent / f"{path.name}.pid").write_text(f"{os.getpid()} {time.time()}")
    return drawn(h, title, path)
def timeline(records, path):
    (path.parent / f"{path.name}.pid").write_text(f"{os.getpid()} {time.time()}")
    return drawn_timeline(records, path)
plots.histogram, plots.timeline = histogram, timeline
named, records = pickle.loads(Path(sys.argv[1]).read_bytes())
outdir = Path(sys.argv[2])
with plots.drawing(named, records, outdir, int(sys.argv[3])):
    (outdir / "body").write_text(f"{os.getpid()} {time.time()}")
"""
    env = {**os.environ, "OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}
    args = [sys.executable, "-W", "error::DeprecationWarning:multiprocessing.popen_fork", "-c", draw]
    drawers, body = {}, {}
    for processes in (1, 2):
        outdir = tmp_path / str(processes)
        subprocess.run([*args, tmp_path / "named.pkl", outdir, str(processes)], check=True, timeout=120, env=env)
        drawers[processes] = [p.read_text().split() for p in outdir.glob("*.pid")]
        body[processes] = (outdir / "body").read_text().split()
    drawn = sorted(p.name for p in (tmp_path / "1").glob("*.png"))
    assert drawn == ["by__category.png", "by__flavour.png", *(f"region__h{i}.png" for i in range(8)), "timeline.png"]
    assert sorted(p.name for p in (tmp_path / "2").glob("*.png")) == drawn
    assert all((tmp_path / "1" / name).read_bytes() == (tmp_path / "2" / name).read_bytes() for name in drawn)
    # One process draws after the body; two others draw what they share.
    assert {pid for pid, _ in drawers[1]} == {body[1][0]}
    assert min(float(t) for _, t in drawers[1]) >= float(body[1][1])
    assert len({pid for pid, _ in drawers[2]}) == 2 and body[2][0] not in {pid for pid, _ in drawers[2]}
    # A figure that fails (in a child) is named with its error; the others are drawn.
    (tmp_path / "named.pkl").write_bytes(pickle.dumps(([("fails", named[1][1]), *named], records)))
    done = subprocess.run(
        [*args, tmp_path / "named.pkl", tmp_path / "3", "2"], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "not drawn: fails.png: ValueError: this figure fails" in done.stderr, done.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "3").glob("*.png")) == drawn


def test_a_plot_drawn_on_the_reused_figure_is_the_plot_drawn_on_a_fresh_one(tmp_path, monkeypatch):
    """A drawing process draws its 1-D plots on one figure, emptied between them: a plot is byte for byte what a
    fresh figure gives, whatever was drawn before it (lines of categories with a legend, a larger scale, a plot that
    failed half-drawn, a 2-D plot on a figure of its own)."""
    rng = np.random.default_rng(5)
    h = hist.Hist.new.Reg(20, 0, 10, name="x", label="x [GeV]").Weight()
    h.fill(x=rng.uniform(0, 10, 300))
    large = hist.Hist.new.Reg(7, -50, 50, name="y").Double()
    large.fill(y=rng.normal(0, 20, 10**5))
    by_category = hist.Hist.new.StrCat(["a", "b", "c"], name="c").Reg(5, 0, 1, name="x").Double()
    by_category.fill(c=["a", "b", "c", "c"], x=[0.1, 0.5, 0.7, 0.9])
    plane = hist.Hist.new.Reg(4, 0, 1, name="u").Reg(4, 0, 1, name="v").Double()
    plane.fill(u=rng.uniform(0, 1, 50), v=rng.uniform(0, 1, 50))
    steps = plots._steps

    def fails_at_its_second_line(ax, h, **style):
        steps(ax, h, **style)
        if len(ax.patches) == 2:
            raise ValueError("half drawn")

    if plots._FIGURE:  # (a figure this process drew on before: this test begins with a fresh one)
        plots._pyplot().close(plots._FIGURE[0])
    plots._FIGURE.clear()
    try:
        assert plots.histogram(h, "h", tmp_path / "fresh.png")
        for i, other in enumerate((by_category, large, plane)):
            assert plots.histogram(other, f"other {i}", tmp_path / f"other{i}.png")
        with monkeypatch.context() as m:
            m.setattr(plots, "_steps", fails_at_its_second_line)
            with pytest.raises(ValueError, match="half drawn"):
                plots.histogram(by_category, "broken", tmp_path / "broken.png")
        assert plots.histogram(h, "h", tmp_path / "after.png")
    finally:
        if plots._FIGURE:
            plots._pyplot().close(plots._FIGURE[0])
        plots._FIGURE.clear()
    assert (tmp_path / "after.png").read_bytes() == (tmp_path / "fresh.png").read_bytes()


def test_summary_names_failures_and_where_the_products_are():
    short = Failure("truncated", PERMANENT, "OSError: expected Chunk of length 403,\nreceived 16 bytes", "replace it")
    records = [record("a", 0, 10), record("d", 5, 20, failure=GONE), record("e", 0, 1, failure=short)]
    summary = report.summarise(records, expected("a", "d", "e"))
    text = summary_line(summary, "results/c")
    assert "1/3 files ok" in text and "FAILED (transient) /store/d.root: FetchError: gone" in text
    assert "FAILED (permanent) /store/e.root: OSError: expected Chunk of length 403, received 16 bytes\n" in text
    assert "INCOMPLETE" in text and "run the same command again" in text
    assert "results/c/histograms.root" in text and "results/c/output.coffea" in text


def test_summary_names_the_files_run_again_with_every_field():
    """config columns: auto: the files whose cut fell short (their records' ``rerun``) are listed in the report and
    counted in the summary, with the first one's cause and the fix; records without ``rerun`` (an older hepvine's) are
    read as never run again."""
    why = "/store/b.root entries 30-60: f raised NotRead: events.Muon.pt: hepvine made these events without Muon"
    old = record("c", 0, 1)
    del old["rerun"]
    records = [record("a", 0, 10), {**record("b", 0, 10), "rerun": why}, old]
    summary = report.summarise(records, expected("a", "b", "c"))
    assert summary["complete"] is True
    assert summary["run_again_with_every_field"] == [{"fid": "ttbar/nominal/b", "path": "/store/b.root", "why": why}]
    text = summary_line(summary, "results/c")
    assert (
        f"1 file(s) ran again with every field, their analysis having used a field the cut of columns: auto left "
        f"out (first: /store/b.root: {why}); set config columns: all" in text
    )
    assert "ran again" not in summary_line(report.summarise([record("a", 0, 1)], expected("a")), "results/c")


def test_retries_count_failures_by_class_once_per_report(tmp_path):
    path = tmp_path / "retries.json"
    bad = Failure("corrupt", PERMANENT, "x", "y")
    summary = report.summarise(
        [record("a", 0, 1, failure=GONE), record("b", 0, 1, failure=bad), record("c", 0, 1)], expected("a", "b", "c")
    )
    retries.update(summary, path)
    retries.update(summary, path)  # the same report again (a run that did nothing): counted once
    assert json.loads(path.read_text())["files"] == {
        "ttbar/nominal/a": {"transient": 1, "permanent": 0},
        "ttbar/nominal/b": {"transient": 0, "permanent": 1, "path": "/store/b.root", "failed_source": "missing"},
    }
    assert retries.transient_counts(path) == {"ttbar/nominal/a": 1}
    assert retries.transient_counts(tmp_path / "none.json") == {}


def test_a_run_that_ended_in_an_error_counts_the_failures_of_the_results_it_wrote(tmp_path):
    """After an error: only results written since the run began are read (an older one, whose batch the run did not
    rerun, is not counted again); one that cannot be read is named; a report the run made before the error is
    counted instead, once."""
    out, path = tmp_path / "results" / "c", tmp_path / "results" / "c" / "retries.json"
    started = out / "index" / "run-started"
    started.parent.mkdir(parents=True)
    started.touch()
    begun = started.stat().st_mtime_ns

    def result(name, *records_):
        merge.write(out / "files" / f"{name}.pkl", {"records": list(records_), "output": None, "events": {}})
        return out / "files" / f"{name}.pkl"

    old = result("old", record("o", 0, 1, failure=GONE))
    os.utime(old, ns=(begun - 10**9, begun - 10**9))  # from an earlier run
    result("new", record("a", 0, 1, failure=GONE), record("b", 0, 1))
    (out / "files" / "torn.pkl").write_bytes(b"\x80\x05not a pickle")
    assert retries.update_after_error(out, started, path) == (
        1,
        [f"{out / 'files' / 'torn.pkl'}: UnpicklingError: " + _unpickling_error(out / "files" / "torn.pkl")],
    )
    assert json.loads(path.read_text())["files"] == {"ttbar/nominal/a": {"transient": 1, "permanent": 0}}

    summary = report.summarise([record("a", 0, 1, failure=GONE), record("b", 0, 1)], expected("a", "b"))
    atomic.write_json(out / "report.json", summary)
    assert retries.update_after_error(out, started, path) == (1, [])
    retries.update(summary, path)  # and the next run's onsuccess with the same report: not again
    assert json.loads(path.read_text())["files"] == {"ttbar/nominal/a": {"transient": 2, "permanent": 0}}
    assert retries.update_after_error(out, out / "index" / "never", path) == (0, [])


def _unpickling_error(path) -> str:
    try:
        pickle.loads(path.read_bytes())
    except pickle.UnpicklingError as e:
        return str(e)
    raise AssertionError(f"{path} unpickles")


def test_failures_tsv_has_one_row_per_failed_file_and_only_its_header_when_none_failed():
    assert report.failures_tsv(report.summarise([record("a", 0, 1)], expected("a"))) == (
        "fid\tpath\trule\toutput\tclass\tkind\tcause\tfix\n"
    )
    odd = Failure("corrupt", PERMANENT, "Error:\tbasket 3\nbad", "replace it")
    summary = report.summarise(
        [record("a", 0, 1), record("d", 0, 1, failure=GONE), record("e", 0, 1, failure=odd)],
        expected("a", "d", "e"),
        "results/x",
    )
    header, *rows = report.failures_tsv(summary).splitlines()
    assert [row.split("\t") for row in rows] == [
        [
            "ttbar/nominal/d",
            "/store/d.root",
            "analyse",
            "results/x/files/ttbar/nominal/direct/000/000.pkl",
            "transient",
            "unreachable",
            "FetchError: gone",
            "run the same command again",
        ],
        [
            "ttbar/nominal/e",
            "/store/e.root",
            "analyse",
            "results/x/files/ttbar/nominal/direct/000/000.pkl",
            "permanent",
            "corrupt",
            "Error: basket 3 bad",
            "replace it",
        ],
    ]


def test_summary_html_shows_the_figures_and_the_failed_files(monkeypatch):
    odd = Failure("not-root", PERMANENT, "ValueError: <b>not a ROOT file</b>", "replace it")
    summary = report.summarise(
        [record("a", 0, 10), record("d", 5, 20, failure=GONE), record("e", 0, 1, failure=odd)],
        expected("a", "d", "e"),
        "results/x",
    )
    page = report.summary_html(summary, "results/x")
    assert "hepvine campaign results/x" in page and "INCOMPLETE" in page and "1 of 3" in page
    assert "2 (1 transient, 1 permanent)" in page and "<td>100</td>" in page and "Gbps" in page
    assert "ttbar/nominal/d" in page and "FetchError: gone" in page and "run the same command again" in page
    assert "&lt;b&gt;not a ROOT file&lt;/b&gt;" in page and "<b>" not in page  # causes are text, never markup
    monkeypatch.setattr(report, "HTML_FAILURE_ROWS", 1)
    page = report.summary_html(summary, "results/x")
    assert "ttbar/nominal/d" in page and "ttbar/nominal/e" not in page
    assert "2 failed file(s); the first 1 are shown, failures.tsv lists them all" in page
    assert "No file failed." in report.summary_html(report.summarise([record("a", 0, 1)], expected("a")), "r")


def test_summary_gives_the_whole_commands_time_beside_the_analysis_window():
    """The physicist's loop waits for the whole command, not only the analysis: the summary says both."""
    import time

    age = process_age_s()
    time.sleep(0.2)
    assert age is not None and age > 0 and 0.15 < process_age_s() - age < 5
    summary = {
        "files": {"ok": 1, "total": 1, "failed": 0},
        "events": 10,
        "bytes_read": 100,
        "wall_seconds": 2.5,
        "cores": 1,
        "event_rate_hz": 4.0,
        "event_rate_per_core_hz": 4.0,
        "data_rate_gbps": 0.0,
        "accounting": {"missing": [], "duplicated": [], "unexpected": []},
        "failed_files": [],
        "complete": True,
    }
    line = summary_line(summary, "results/x", 7.25)
    assert (
        "this command: 7.2 s in all; the analysis window (first file started to last ended, over the campaign's "
        "runs): 2.5 s" in line
    )
    assert "this command" not in summary_line(summary, "results/x")


def test_plot_file_names_are_links_docutils_reads_and_never_overwrite_each_other():
    """Each histogram's plot file is one of its own, and a name Snakemake's report makes a reST hyperlink target of
    (its ``.. _<file name>: javascript:...`` lines, rendered by docutils as the report renders them) without a
    warning: a DAS key's histograms begin with '_', which docutils read as an anonymous target."""
    import io

    from docutils.core import publish_parts

    names = ["_TTto4Q_Run3_NANOAODSIM/jet_pt", "TTto4Q_Run3_NANOAODSIM/jet_pt", "a/b", "a__b", "timeline", "__"]
    names += ["x", "Jet_pt", "jet_pt"]
    files = plots.file_names(names)
    assert files == [
        "TTto4Q_Run3_NANOAODSIM__jet_pt-2.png",  # the name without a leading '_' keeps its file
        "TTto4Q_Run3_NANOAODSIM__jet_pt.png",
        "a__b.png",
        "a__b-2.png",
        "timeline-2.png",
        "histogram.png",
        "x.png",
        "Jet_pt.png",
        "jet_pt-2.png",  # reST target names (and some filesystems) are blind to case
    ]
    links = "".join(f".. _{name}: javascript:app.showResultInfo('{name}')\n" for name in ["timeline.png", *files])
    warnings = io.StringIO()
    publish_parts(f"The plots.\n\n{links}", writer_name="html", settings_overrides={"warning_stream": warnings})
    assert warnings.getvalue() == ""
    bad = io.StringIO()
    publish_parts(".. __x.png: javascript:x\n", writer_name="html", settings_overrides={"warning_stream": bad})
    assert "malformed hyperlink target" in bad.getvalue()  # what the old name of a DAS key's plot gave


def test_a_plot_file_name_too_long_for_a_filesystem_is_cut_to_one_of_its_own(tmp_path):
    """A long DAS key and a deep path (or names of many-byte letters) make a plot file name the filesystem takes
    (255 bytes), still one of its own: its beginning kept, a hash of the whole added."""
    das = "/" + "TTto2L2Nu_TuneCP5_13p6TeV_powheg-pythia8" * 6 + "/Run3Summer22NanoAODv12-130X_v5-v2/NANOAODSIM"
    names = [f"{das}/jets/pt/{n}" for n in range(3)] + ["é" * 200, "é" * 201, "short"]
    files = plots.file_names(names)
    assert len(set(f.casefold() for f in files)) == len(names)
    assert all(len(f.encode()) <= 255 for f in files)
    assert files[0].startswith("TTto2L2Nu_TuneCP5_13p6TeV_powheg-pythia8") and files[-1] == "short.png"
    assert files[3].startswith("é" * 100) and files[3].endswith(".png")
    for f in files:
        (tmp_path / f).write_bytes(b"")  # the filesystem takes each
    assert len(list(tmp_path.iterdir())) == len(names)
    assert plots.file_names(["a" * 240]) == ["a" * 240 + ".png"]  # as long as may be: left as it is
