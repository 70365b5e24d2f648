"""The AGC's variation conventions, through the real driver, merge and report on generated files: a spec of ttbar
{nominal, scaleup} and data fills ``nominal`` with the nominal sample's events only, ``scaleup`` with the scaleup
sample's only (nominal selection), ``pt_scale_up`` and ``btag_var_*`` from the nominal sample only, data only
``nominal``; histograms.root (from the merged output of the AGC processor, TtbarProcessor) has exactly the TH1s those
samples fill, empty ones too; a sample variation named like a systematic is each of its files' permanent
analysis-error."""

from __future__ import annotations

import json

import awkward as ak
import numpy as np
import pytest
import uproot

from hepvine.devtools import generate
from hepvine.examples import agc as analysis
from hepvine.jobs import driver, merge
from hepvine.model import atomic, dataset
from hepvine.products import report
from hepvine.reading import fetch
from hepvine.routing import index
from hepvine.work import processor

EVENTS = 3000
LUMI_PB = 3378
AGC = "hepvine.examples.agc:TtbarProcessor"
XSEC = 729.84
BTAG = [f"btag_var_{i}_{d}" for i in range(4) for d in ("up", "down")]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """A spec of ttbar {nominal: 2 files, scaleup: 1 file, ME_var: 1 missing file} and data {nominal: 1 file}, run
    batch by batch with the driver, merged, and reported: (spec, merged result, report directory)."""
    where = tmp_path_factory.mktemp("variations")

    def sample(process: str, first: int, n: int) -> dict:
        files = [
            generate.write_file(
                where / f"{process}_{first + i}.root",
                process,
                EVENTS,
                index=first + i,
                seed=5,
                compression=uproot.ZSTD(1),
            )  # quick to write; the codec changes nothing here
            for i in range(n)
        ]
        return {"nevts_total": EVENTS * n + 1000, "files": files}  # nevts_total counts unlisted events too

    gone = {"nevts_total": EVENTS, "files": [{"path": str(where / "gone.root"), "nevts": EVENTS}]}
    spec = {
        "ttbar": {"xsec": XSEC, "nominal": sample("ttbar", 0, 2), "scaleup": sample("ttbar", 2, 1), "ME_var": gone},
        "data": {"nominal": sample("data", 0, 1)},
    }
    batches = index.plan(dataset.tasks(spec), 8, fetch.local_route)
    analysis_ = processor.load(AGC, {"lumi_pb": LUMI_PB})
    results = [driver.run_batch(index.shard(b, {}), analysis_, retry=fetch.Retry(1, 0)) for b in batches]
    index.write(where / "index", batches, {})
    paths = [where / f"batch-{i}.pkl" for i in range(len(results))]  # the root merge's inputs: the report adds them up
    for path, result in zip(paths, results):
        atomic.write_pickle(path, result)
    merged = merge.merge(merge.load(path) for path in paths)
    out = where / "out"
    assert (
        report.main(
            [
                "--results",
                *map(str, paths),
                "--expected",
                str(where / "index" / "expected.json"),
                "--analysis",
                AGC,
                "--analysis-args",
                json.dumps({"lumi_pb": LUMI_PB}),
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
            ]
        )
        == 0
    )
    return spec, merged, out


def weight(spec: dict, process: str, variation: str) -> float:
    return analysis.event_weight(spec[process].get("xsec"), LUMI_PB, spec[process][variation]["nevts_total"])


def events_of(entry: dict) -> ak.Array:
    return uproot.open(entry["path"])["Events"].arrays(analysis.BRANCHES, library="ak")


def by_file(spec: dict, process: str, variation: str, jet_variation: str, region: str) -> tuple[np.ndarray, ...]:
    """(values, variances) with flow of the observables of PROCESS/VARIATION's files under JET_VARIATION, histogrammed
    here file by file, apart from the driver."""
    h = analysis.new_histogram()
    w = weight(spec, process, variation)
    for entry in spec[process][variation]["files"]:
        values = analysis.observables(events_of(entry))[jet_variation][region]
        h.fill(region=region, process=process, variation="nominal", observable=values, weight=np.full(len(values), w))
    one = h[{"region": region, "process": process, "variation": "nominal"}]
    return one.values(flow=True), one.variances(flow=True)


def th1(path, name: str) -> tuple[np.ndarray, np.ndarray]:
    with uproot.open(path) as f:
        return f[name].values(flow=True), f[name].variances(flow=True)


@pytest.mark.parametrize("region", analysis.REGIONS)
def test_each_histogram_variation_holds_only_its_samples_events(campaign, region):
    spec, _, out = campaign
    path = out / "histograms.root"
    nominal = by_file(spec, "ttbar", "nominal", "nominal", region)
    scaleup = by_file(spec, "ttbar", "scaleup", "nominal", region)
    shifted = by_file(spec, "ttbar", "nominal", "pt_scale_up", region)
    data = by_file(spec, "data", "nominal", "nominal", region)
    assert nominal[0].sum() > 0 and scaleup[0].sum() > 0 and data[0].sum() > 0, "a sample selected nothing"
    assert not np.allclose(nominal[0], shifted[0]) and not np.allclose(
        nominal[0] / weight(spec, "ttbar", "nominal"), scaleup[0] / weight(spec, "ttbar", "scaleup")
    )
    for name, want in [
        (f"{region}_ttbar_nominal", nominal),
        (f"{region}_ttbar_scaleup", scaleup),
        (f"{region}_ttbar_pt_scale_up", shifted),
        (f"{region}_data_nominal", data),
    ]:
        got = th1(path, name)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=0, err_msg=name)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=0, err_msg=name)
    # The missing ME_var file was never analysed: no TH1 of it (as coffea's Runner skipping a bad file), while the
    # report names the file (test_histograms_root_has_exactly_the_th1s_each_sample_fills).
    with uproot.open(path) as f:
        assert f"{region}_ttbar_ME_var" not in f


def first_jets_pt(events: ak.Array, region: str) -> np.ndarray:
    """Per event of REGION (nominal selection), the pt of its first four selected jets: the AGC's selection written
    again with awkward, event-wise, as ttbar_analysis_pipeline.py lines 238-262 do."""
    e = (
        (events.Electron_pt > 30)
        & (abs(events.Electron_eta) < 2.1)
        & (events.Electron_cutBased == 4)
        & (events.Electron_sip3d < 4)
    )
    m = (
        (events.Muon_pt > 30)
        & (abs(events.Muon_eta) < 2.1)
        & events.Muon_tightId
        & (events.Muon_sip3d < 4)
        & (events.Muon_pfRelIso04_all < 0.15)
    )
    jets = (events.Jet_pt > 30) & (abs(events.Jet_eta) < 2.4) & ((events.Jet_jetId & 4) != 0)
    pt, nb = events.Jet_pt[jets], ak.sum(events.Jet_btagCSVV2[jets] > 0.5, axis=1)
    chosen = (
        ((ak.sum(e, axis=1) + ak.sum(m, axis=1)) == 1)
        & (ak.num(pt) >= 4)
        & ((nb == 1) if region == "4j1b" else (nb >= 2))
    )
    return ak.to_numpy(pt[chosen][:, :4]).astype(np.float64)


@pytest.mark.parametrize("region", analysis.REGIONS)
def test_btag_variations_reweight_the_nominal_sample_by_its_ith_jet(campaign, region):
    """Each btag_var_<i>_<up|down> TH1 holds the nominal sample's events (the nominal selection), each weighted by
    1 ± 0.075 × pt_i / 50 (the AGC's correction, make_corrections_json.py lines 3-27): its total weight, and its
    bins' sum of weights squared, equal those computed here from the first four selected jets' pt."""
    spec, _, out = campaign
    w = weight(spec, "ttbar", "nominal")
    pts = np.concatenate([first_jets_pt(events_of(e), region) for e in spec["ttbar"]["nominal"]["files"]])
    assert len(pts) > 0
    nominal = th1(out / "histograms.root", f"{region}_ttbar_nominal")
    np.testing.assert_allclose(nominal[0].sum(), w * len(pts), rtol=1e-12)
    for i in range(4):
        for direction, sign in (("up", 1.0), ("down", -1.0)):
            weights = w * (1.0 + sign * pts[:, i] * 0.075 / 50)
            values, variances = th1(out / "histograms.root", f"{region}_ttbar_btag_var_{i}_{direction}")
            np.testing.assert_allclose(values.sum(), weights.sum(), rtol=1e-12)
            np.testing.assert_allclose(variances.sum(), (weights**2).sum(), rtol=1e-12)
            assert (values > nominal[0]).any() if sign > 0 else (values < nominal[0]).any()


def test_histograms_root_has_exactly_the_th1s_each_sample_fills(campaign):
    spec, merged, out = campaign
    ttbar = ["nominal", "pt_scale_up", *BTAG, "scaleup"]  # not ME_var: its only file failed, nothing analysed it
    want = {f"{r}_ttbar_{v}" for r in analysis.REGIONS for v in ttbar} | {f"{r}_data_nominal" for r in analysis.REGIONS}
    events = {"events_ttbar_nominal", "events_ttbar_scaleup", "events_data_nominal"}  # ME_var's file failed
    with uproot.open(out / "histograms.root") as f:
        assert set(f.keys(cycle=False)) == want | events
        assert f["events_ttbar_scaleup"].values().sum() == EVENTS
    # The merged output holds the same histograms: process data has none outside nominal.
    assert set(merged["output"]) == want | events
    assert {name for name in merged["output"] if "_data_" in name} == {
        *(f"{r}_data_nominal" for r in analysis.REGIONS),
        "events_data_nominal",
    }
    result = json.loads((out / "report.json").read_text())
    assert result["files"] == {"total": 5, "ok": 4, "failed": 1} and result["complete"] is False
    assert [f["fid"] for f in result["failed_files"]] == ["ttbar/ME_var/0"]
    assert sorted(result["histograms"]["written"]) == sorted(want | events) and result["histograms"]["skipped"] == {}
    assert result["events_per_dataset"] == {
        "data__nominal": EVENTS,
        "ttbar__nominal": 2 * EVENTS,
        "ttbar__scaleup": EVENTS,
    }


def test_which_variations_a_sample_fills():
    assert analysis.variations("ttbar", "nominal", data=False) == ("nominal", "pt_scale_up", *BTAG)
    assert analysis.variations("wjets", "nominal", data=False) == (
        "nominal",
        "pt_scale_up",
        *BTAG,
        "scale_var_up",
        "scale_var_down",
    )
    assert analysis.variations("ttbar", "PS_var", data=False) == ("PS_var",)
    assert analysis.variations("data", "nominal", data=True) == ("nominal",)


def test_wjets_scale_var_is_the_nominal_weight_times_1_plus_or_minus_0_025(campaign):
    events = events_of(campaign[0]["ttbar"]["nominal"]["files"][0])  # many selected events, filled as W+jets
    h = analysis.new_histogram()
    analysis.fill(h, events, "wjets", 2.0)
    nominal = h[{"process": "wjets", "variation": "nominal"}]
    assert nominal.values().sum() > 0
    for name, factor in (("scale_var_up", 1.025), ("scale_var_down", 0.975)):
        varied = h[{"process": "wjets", "variation": name}]
        np.testing.assert_allclose(varied.values(), nominal.values() * factor, rtol=1e-12)
        np.testing.assert_allclose(varied.variances(), nominal.variances() * factor**2, rtol=1e-12)


def test_a_sample_named_like_a_systematic_is_each_of_its_files_permanent_analysis_error(tmp_path):
    """The processor refuses the sample (it would be summed into the nominal sample's systematic): each of its files
    is a permanent analysis-error that names the problem and where the processor raised it; nothing is filled."""
    files = [
        generate.write_file(tmp_path / f"t{i}.root", "ttbar", 100, index=i, compression=uproot.ZSTD(1))
        for i in range(2)
    ]
    spec = {"ttbar": {"xsec": XSEC, "btag_var_0_up": {"nevts_total": 200, "files": files}}}
    (batch,) = index.plan(dataset.tasks(spec), 8, fetch.local_route)
    result = driver.run_batch(index.shard(batch, {}), processor.load(AGC), retry=fetch.Retry(1, 0))
    assert result["output"] is None and result["events"] == {} and len(result["records"]) == 2
    for record in result["records"]:
        assert record["failure"]["kind"] == "analysis-error" and record["failure"]["failure_class"] == "permanent"
        assert "ttbar/btag_var_0_up: a sample variation named like the systematic" in record["failure"]["cause"]
        assert f"{analysis.__file__}:" in record["failure"]["fix"]


def test_merging_a_result_of_an_older_hepvine_says_to_make_it_again(tmp_path, capsys):
    from hepvine.jobs import merge
    from hepvine.model import atomic

    old = tmp_path / "old.pkl"  # a batch result as hepvine wrote it before analyses were plug-ins: no "output"
    atomic.write_pickle(old, {"records": [], "hist": None, "events": {}, "variations": {}})
    assert merge.main(["--output", str(tmp_path / "merged.pkl"), str(old)]) == 1
    err = capsys.readouterr().err
    assert str(old) in err and "--forcerun analyse" in err
    assert not (tmp_path / "merged.pkl").exists()
