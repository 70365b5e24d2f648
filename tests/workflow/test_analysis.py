"""The columnar analysis equals an independent, event-by-event implementation of the same selection written here,
bin by bin, on generated NanoAOD-like files (nominal and pt_scale_up); a jet whose discriminant equals the working
point exactly is not b tagged (the AGC's ``> 0.5``); the coffea processor (``TtbarProcessor``, read through NanoEvents
of either schema, in chunks) fills exactly what ``fill`` fills, under histograms.root's names, empty ones too."""

from __future__ import annotations

import itertools
import math

import awkward as ak
import numpy as np
import pytest
import uproot
from kept import generated_file

from hepvine.devtools import generate
from hepvine.examples import agc as analysis
from hepvine.model import dataset
from hepvine.work import processor


def loop_observables(ev: dict, i: int, scale: float, btag_cut: float = 0.5) -> tuple[str, float] | None:
    """One event, by hand: (region, observable) or None; a jet is b tagged when its Jet_btagCSVV2 is > BTAG_CUT (the
    AGC's 0.5 by default)."""
    leptons = 0
    for pt, eta, cut, sip in zip(
        ev["Electron_pt"][i], ev["Electron_eta"][i], ev["Electron_cutBased"][i], ev["Electron_sip3d"][i]
    ):
        leptons += pt > 30 and abs(eta) < 2.1 and cut == 4 and sip < 4
    for pt, eta, tight, sip, iso in zip(
        ev["Muon_pt"][i], ev["Muon_eta"][i], ev["Muon_tightId"][i], ev["Muon_sip3d"][i], ev["Muon_pfRelIso04_all"][i]
    ):
        leptons += pt > 30 and abs(eta) < 2.1 and bool(tight) and sip < 4 and iso < 0.15
    jets = []
    for pt, eta, phi, mass, btag, jet_id in zip(
        ev["Jet_pt"][i],
        ev["Jet_eta"][i],
        ev["Jet_phi"][i],
        ev["Jet_mass"][i],
        ev["Jet_btagCSVV2"][i],
        ev["Jet_jetId"][i],
    ):
        pt = float(pt) * scale
        if pt > 30 and abs(eta) < 2.4 and (int(jet_id) & 4):
            jets.append((pt, float(eta), float(phi), float(mass), float(btag)))
    if leptons != 1 or len(jets) < 4:
        return None
    nb = sum(j[4] > btag_cut for j in jets)
    if nb == 1:
        return "4j1b", sum(j[0] for j in jets)
    if nb >= 2:
        best = None
        for combo in itertools.combinations(jets, 3):
            if not any(j[4] > btag_cut for j in combo):
                continue
            px = sum(j[0] * math.cos(j[2]) for j in combo)
            py = sum(j[0] * math.sin(j[2]) for j in combo)
            pz = sum(j[0] * math.sinh(j[1]) for j in combo)
            e = sum(math.sqrt((j[0] * math.cosh(j[1])) ** 2 + j[3] ** 2) for j in combo)
            pt3 = math.hypot(px, py)
            if best is None or pt3 > best[0]:
                best = (pt3, math.sqrt(max(e * e - px * px - py * py - pz * pz, 0.0)))
        return "4j2b", best[1]
    return None


# W+jets rarely has four jets and a b tag: few of its events pass, as in the real analysis.
@pytest.mark.parametrize("process, least_selected", [("ttbar", 20), ("wjets", 1)])
def test_columnar_equals_event_loop(tmp_path, process, least_selected):
    path = tmp_path / f"{process}.root"
    generated_file(path, process, 4000, index=3, seed=7)
    events = uproot.open(path)["Events"].arrays(analysis.BRANCHES, library="ak")
    columnar = analysis.new_histogram()
    counts = analysis.fill(columnar, events, process, weight=0.5)

    by_hand = analysis.new_histogram()
    plain = {b: events[b].to_list() for b in analysis.BRANCHES}
    selected = {r: 0 for r in analysis.REGIONS}
    for variation, scale in analysis.VARIATIONS.items():
        for i in range(len(events)):
            found = loop_observables(plain, i, scale)
            if found:
                by_hand.fill(region=found[0], process=process, variation=variation, observable=[found[1]], weight=[0.5])
                selected[found[0]] += variation == "nominal"
    assert counts == selected
    assert sum(selected.values()) >= least_selected, "too few selected events to compare anything"
    assert all(counts[r] for r in analysis.REGIONS) or process == "wjets"
    for region in analysis.REGIONS:
        for variation in analysis.VARIATIONS:
            a = columnar[{"region": region, "process": process, "variation": variation}]
            b = by_hand[{"region": region, "process": process, "variation": variation}]
            np.testing.assert_allclose(a.values(flow=True), b.values(flow=True), rtol=0, atol=1e-9)
            np.testing.assert_allclose(a.variances(flow=True), b.variances(flow=True), rtol=0, atol=1e-9)


def test_a_discriminant_at_the_working_point_is_not_b_tagged(tmp_path):
    """AGC reference: ``btagCSVV2 > B_TAG_THRESHOLD`` (see the analysis module's docstring): events whose jets sit
    exactly at 0.5 are untagged, so moving every tagged jet to 0.5 empties both regions."""
    path = generated_file(tmp_path / "t.root", "ttbar", 2000, index=2, seed=4)["path"]
    events = uproot.open(path)["Events"].arrays(analysis.BRANCHES, library="ak")
    before = analysis.fill(analysis.new_histogram(), events, "ttbar", 1.0)
    events["Jet_btagCSVV2"] = ak.where(events["Jet_btagCSVV2"] > 0.5, np.float32(0.5), events["Jet_btagCSVV2"])
    assert before["4j1b"] > 0 and before["4j2b"] > 0
    assert analysis.fill(analysis.new_histogram(), events, "ttbar", 1.0) == {"4j1b": 0, "4j2b": 0}


def test_event_weight():
    assert analysis.event_weight(None, 3378, 1000) == 1.0
    assert analysis.event_weight(729.84, 3378, 1_000_000) == pytest.approx(729.84 * 3378 / 1e6)


def test_generated_file_is_deterministic_and_nanoaod_shaped(tmp_path):
    a = generate.write_file(tmp_path / "a.root", "ttbar", 1000, index=1, seed=5)
    b = generate.write_file(tmp_path / "b.root", "ttbar", 1000, index=1, seed=5)
    ta, tb = uproot.open(a["path"])["Events"], uproot.open(b["path"])["Events"]
    assert set(ta.keys()) == set(tb.keys())
    for name in ("nJet", "Jet_pt", "Muon_tightId", "event"):
        assert ta[name].array().to_list() == tb[name].array().to_list()
    keys = set(ta.keys())
    assert {"run", "luminosityBlock", "event", "genWeight", "nJet", "nElectron", "nMuon"} <= keys
    assert len(keys - set(analysis.BRANCHES)) >= 60
    assert set(uproot.open(a["path"]).keys(cycle=False)) == {"Events", "LuminosityBlocks", "Runs"}
    assert uproot.open(a["path"]).file.compression.__class__.__name__ == "LZMA"


@pytest.mark.parametrize("schema, chunksize", [("NanoAODSchema", 100_000), ("BaseSchema", 700)])
def test_the_processor_fills_what_fill_fills_under_the_th1_names(tmp_path, schema, chunksize):
    """TtbarProcessor over a file (hepvine.work.processor.run_file, in chunks or not) equals ``fill`` over its arrays:
    one 1-D histogram ``<region>_<process>_<variation>`` per variation the sample fills, and
    ``events_<process>_<variation>`` holding the events analysed; a sample that selects nothing has them all, empty."""
    path = str(generated_file(tmp_path / "t.root", "ttbar", 2000, index=2, seed=4)["path"])
    (ttbar,) = dataset.tasks(
        {"ttbar": {"xsec": 729.84, "nominal": {"nevts_total": 10_000, "files": [{"path": path, "nevts": 2000}]}}}
    )
    agc = processor.load("hepvine.examples.agc:TtbarProcessor", {"lumi_pb": 1000.0}, schema, chunksize)
    out, events, nbytes = processor.run_file(path, ttbar, agc)
    assert events == 2000 and nbytes > 0
    expected = analysis.new_histogram()
    analysis.fill(
        expected,
        uproot.open(path)["Events"].arrays(analysis.BRANCHES),
        "ttbar",
        analysis.event_weight(729.84, 1000.0, 10_000),
    )
    fills = analysis.variations("ttbar", "nominal", data=False)
    assert set(out) == {f"{r}_ttbar_{v}" for r in analysis.REGIONS for v in fills} | {"events_ttbar_nominal"}
    for region in analysis.REGIONS:
        for variation in fills:
            want = expected[{"region": region, "process": "ttbar", "variation": variation}]
            assert out[f"{region}_ttbar_{variation}"].axes == want.axes
            assert out[f"{region}_ttbar_{variation}"].storage_type == want.storage_type
            np.testing.assert_allclose(
                out[f"{region}_ttbar_{variation}"].values(flow=True), want.values(flow=True), rtol=1e-12
            )
            np.testing.assert_allclose(
                out[f"{region}_ttbar_{variation}"].variances(flow=True), want.variances(flow=True), rtol=1e-12
            )
    assert out["events_ttbar_nominal"].values().sum() == 2000
    # A W+jets file of a few events selects nothing: every TH1 W+jets fills (scale_var too) is there, empty.
    few = str(generated_file(tmp_path / "w.root", "wjets", 5, index=1, seed=4)["path"])
    assert analysis.fill(
        analysis.new_histogram(), uproot.open(few)["Events"].arrays(analysis.BRANCHES), "wjets", 1.0
    ) == {"4j1b": 0, "4j2b": 0}
    (wjets,) = dataset.tasks(
        {"wjets": {"xsec": 1.0, "nominal": {"nevts_total": 5, "files": [{"path": few, "nevts": 5}]}}}
    )
    empty, events, _ = processor.run_file(few, wjets, agc)
    fills = analysis.variations("wjets", "nominal", data=False)
    assert "scale_var_up" in fills and events == 5
    assert set(empty) == {f"{r}_wjets_{v}" for r in analysis.REGIONS for v in fills} | {"events_wjets_nominal"}
    assert all(empty[f"{r}_wjets_{v}"].values(flow=True).sum() == 0 for r in analysis.REGIONS for v in fills)


@pytest.mark.parametrize("schema", ["NanoAODSchema", "BaseSchema"])
def test_the_processor_reads_a_files_branch_names_once_for_its_chunks(tmp_path, monkeypatch, schema):
    """TtbarProcessor finds the era of each chunk from the branch names of its file's tree, read off the events once a
    file (``_names_of``): a job's processor reads them once for a file of three chunks (and the trace's empty chunk of
    it, with NanoAODSchema: every field; the chunks after it are cut), again for the job's next file, and the
    histograms are those of names read for every chunk."""
    paths = [str(generated_file(tmp_path / f"t{i}.root", "ttbar", 2000, index=i, seed=4)["path"]) for i in (1, 2)]
    tasks = dataset.tasks(
        {"ttbar": {"xsec": 1.0, "nominal": {"nevts_total": 4000, "files": [{"path": p, "nevts": 2000} for p in paths]}}}
    )
    read = []
    names = analysis.Branches.names
    monkeypatch.setattr(analysis.Branches, "names", lambda self: read.append(1) or names(self))

    def job() -> list[dict]:
        agc = processor.load("hepvine.examples.agc:TtbarProcessor", schema=schema, chunksize=700)
        return [processor.run_file(task.path, task, agc)[0] for task in tasks]

    once = job()
    assert len(read) == 2
    monkeypatch.setattr(analysis.TtbarProcessor, "_names_of", lambda self, events, branches: branches.names())
    every = job()
    assert len(read) >= 2 + 2 * 3
    for a, b in zip(once, every):
        assert a.keys() == b.keys() and all(a[k] == b[k] for k in a)
