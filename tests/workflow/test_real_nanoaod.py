"""hepvine's per-file analysis (the driver running the default analysis, hepvine.examples.agc:TtbarProcessor, through
NanoEvents) on every real NanoAOD file of ../shared/nanoaod (Run 2 and Run 3, simulation and collision data, TTree and
RNTuple) decides the expected era and gives, bin by bin, the histograms of an independent recomputation of the same
selection with coffea's NanoEvents (the reference of benchmarks/analysis.py); and a campaign over all of them, as they
are and recompressed to ZSTD, gives coffea's histograms.

The files stay where they are (never copied into the repository): ``$HEPVINE_NANOAOD`` or ``<checkout>/../shared/
nanoaod``. Most of them select few or no events; ``ttH_M125_2017.root`` fills both regions and is asserted to.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import uproot

from hepvine.examples import agc as analysis
from hepvine.jobs import driver
from hepvine.model import eras
from hepvine.reading import fetch
from hepvine.work import processor

CHECKOUT = Path(__file__).resolve().parents[2]
RNTUPLE_2015 = "cmsopendata2015_ttbar_19980_NANOAOD_RNTupleImporter_rntuple_v1-0-0-1.root"
# file: (the spec's era, or None to decide it from the file; the era expected; the jet ID's source)
FILES = {
    "nanoAOD_2015_CMS_Open_Data_ttbar.root": (None, "run2", eras.JET_ID_BIT),
    RNTUPLE_2015: (None, "run2", eras.JET_ID_BIT),
    "nano_dy.root": (None, "run2", eras.JET_ID_BIT),
    "nano_dy_rntuple.root": (None, "run2", eras.JET_ID_BIT),
    "nano_dimuon.root": (None, "run2", eras.JET_ID_BIT),  # collision data, run 315267 (2018)
    "pfnano.root": (None, "run2", eras.JET_ID_BIT),
    "ttH_M125_2017.root": (None, "run2", eras.JET_ID_BIT),
    "EGamma_F_Skim.root": (None, "run3-2022EE", eras.JET_ID_BIT),  # collision data, run 360393 (2022F)
    "DYto2E.root": (None, "run3-2023", eras.JET_ID_BIT),  # collision data, run 367475 (2023C)
    # Run 3 simulation does not say its year: its process needs the era in the spec (benchmarks/analysis.py,
    # REAL_SPEC_ERAS, is checked to agree below).
    "ggH_M125_amcatnlo_v13.root": ("run3-2022EE", "run3-2022EE", eras.JET_ID_BIT),  # Run3Summer22EE (the README)
    "nano_tt_v15.root": ("run3-2022", "run3-2022", "fractions"),  # no campaign recorded; v15: no Jet_jetId
}


@pytest.fixture(scope="module")
def nanoaod() -> Path:
    where = Path(os.environ.get("HEPVINE_NANOAOD") or CHECKOUT.parent / "shared" / "nanoaod")
    if not where.is_dir():
        pytest.fail(
            f"the real NanoAOD files are not at {where}: set HEPVINE_NANOAOD to their directory (inside the "
            "sandbox, ../shared must be visible)"
        )
    return where


@pytest.fixture(scope="module")
def bench():
    """benchmarks/analysis.py, whose coffea_histogram is the reference."""
    spec = importlib.util.spec_from_file_location("bench_analysis", CHECKOUT / "benchmarks" / "analysis.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def entry(path: Path, era: str | None, nevts: int) -> dict:
    """A shard's entry for PATH as the sample real/nominal (xsec 2 pb), as hepvine.routing.index.shard writes it."""
    metadata = {"process": "real", "variation": "nominal", "xsec": 2.0, "nevts_total": nevts, "era": era}
    return {
        "fid": f"real/nominal/{path.stem}",
        "path": str(path),
        "process": "real",
        "variation": "nominal",
        "index": 0,
        "nevts": nevts,
        "nevts_total": nevts,
        "xsec": 2.0,
        "era": era,
        "bytes": None,
        "dataset": "real__nominal",
        "treename": "Events",
        "metadata": metadata,
        "uuid": None,
        "steps": None,
        "route": fetch.local_route(str(path)),
    }


def decided_era(path: Path, era: str | None) -> str:
    """What the AGC processor decides for the file at PATH (the spec's ERA, else the file's): Selection.describe()."""
    from coffea.nanoevents import NanoAODSchema, NanoEventsFactory

    events = NanoEventsFactory.from_root(
        {str(path): "Events"}, schemaclass=NanoAODSchema, mode="virtual", metadata={"filename": str(path), "era": era}
    ).events()
    return analysis.file_selection(events, analysis.Branches(events)).describe()


def test_every_shared_file_is_covered(nanoaod, bench):
    assert sorted(p.name for p in nanoaod.glob("*.root")) == sorted(FILES)
    assert bench.REAL_SPEC_ERAS == {name: forced for name, (forced, _, _) in FILES.items() if forced}


@pytest.mark.parametrize("name", sorted(FILES))
def test_hepvine_equals_coffea(nanoaod, bench, name):
    forced, expected_era, jet_id = FILES[name]
    path = nanoaod / name
    entries = num_entries(path)
    record, out = driver.run_file(
        entry(path, forced, entries), "test", processor.load("hepvine.examples.agc:TtbarProcessor", {"lumi_pb": 3378})
    )
    assert record.failure is None, record.error
    assert record.events == entries
    era = decided_era(path, forced)
    assert era.split()[0] == expected_era and ("(by spec;" in era) == bool(forced), era
    assert era.endswith(f"jet ID from {jet_id})"), era

    weight = analysis.event_weight(2.0, 3378, entries)
    selection = eras.Selection(eras.ERAS[expected_era], "test", jet_id)
    reference, events, counts = bench.coffea_histogram(path, "real", weight, selection)
    assert events == entries
    if name == "ttH_M125_2017.root":  # the one file where the Run 2 selection fills both regions
        assert counts["4j1b"] > 0 and counts["4j2b"] > 0
    for region in analysis.REGIONS:
        for variation in analysis.variations("real", "nominal", data=False):
            one = out[f"{region}_real_{variation}"]
            got = np.stack([one.values(flow=True), one.variances(flow=True)])
            want = contents(reference, region, variation)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=f"{name} {region} {variation}")


@pytest.mark.parametrize("name", sorted(FILES))
def test_columns_traced_gives_what_every_field_gives(nanoaod, name):
    """Config columns: traced (``hepvine.work.cutform``) on the AGC processor: the same record and histograms as with
    every field, the era decided alike (the processor looks for genWeight and era markers among the fields, of
    collections it does not read too), the plain trees' chunks cut where the processor can be traced (not on Run 3
    collision data: it reads the era off the first event's run, which an empty chunk has not)."""
    forced = FILES[name][0]
    path = nanoaod / name
    got = {}
    for columns in ("all", "traced"):
        agc = processor.load("hepvine.examples.agc:TtbarProcessor", {"lumi_pb": 3378}, columns=columns)
        record, out = driver.run_file(entry(path, forced, num_entries(path)), "test", agc)
        assert record.failure is None, record.error
        got[columns] = (record.events, out, agc)
    (n, every, _), (n_traced, traced, cut) = got["all"], got["traced"]
    assert n_traced == n and traced.keys() == every.keys()
    for key, h in every.items():
        np.testing.assert_array_equal(traced[key].values(flow=True), h.values(flow=True), err_msg=key)
        np.testing.assert_array_equal(traced[key].variances(flow=True), h.variances(flow=True), err_msg=key)
    plain = isinstance(uproot.open(path)["Events"], uproot.TTree)
    traced_ok = all(cut.traced.values())
    assert traced_ok == (FILES[name][1] == "run2" or forced is not None)  # Run 3 data: its era from its run
    assert any(type(v).__name__ == "Cut" for v in cut.forms.values()) == (plain and traced_ok)


def contents(h, region: str, variation: str, process: str = "real") -> np.ndarray:
    """(values, variances) with flow of H's PROCESS (zeros where nothing was filled: no category then)."""
    if process not in h.axes["process"]:
        return np.zeros((2, h.axes["observable"].size + 2))
    one = h[{"region": region, "process": process, "variation": variation}]
    return np.stack([one.values(flow=True), one.variances(flow=True)])


def read(path: Path, branches: list[str]) -> ak.Array:
    with uproot.open(path) as f:
        return f["Events"].arrays(branches, library="ak")


def num_entries(path: Path) -> int:
    with uproot.open(path) as f:
        return f["Events"].num_entries


def test_rntuple_reads_the_same_events_as_the_ttree(nanoaod):
    """The RNTuple version of nano_dy.root (its 40 events) gives the analysis the same arrays (fields have the TTree's
    branch names) and the same observables, event by event. (The 2015 ttbar RNTuple holds other events than the
    TTree file.)"""
    branches = ["event", *analysis.BRANCHES]
    a, b = read(nanoaod / "nano_dy.root", branches), read(nanoaod / "nano_dy_rntuple.root", branches)
    assert len(b) == 40 and a["event"].to_list() == b["event"].to_list()
    for branch in branches:
        assert a[branch].to_list() == b[branch].to_list(), branch
    # The whole selection on both: the same observables in every region and variation.
    for variation, regions in analysis.observables(a).items():
        for region, values in regions.items():
            np.testing.assert_array_equal(values, analysis.observables(b)[variation][region])


def test_tight_lepton_veto_from_fractions_equals_the_stored_jet_id(nanoaod):
    """NanoAOD v13 stores Jet_jetId and the fractions: the TightLeptonVeto hepvine computes for v15 files agrees with
    the stored bit on its central jets (|eta| <= 2.6)."""
    names = ["Jet_eta", *eras.JET_ID_FRACTIONS, eras.JET_ID_BIT]
    jets = read(nanoaod / "ggH_M125_amcatnlo_v13.root", names)
    flat = {name.removeprefix("Jet_"): analysis._jagged(jets[name]) for name in names}
    central = np.abs(flat["eta"][0]) <= 2.6
    computed = analysis._tight_lepton_veto(flat)[central]
    stored = (flat["jetId"][0][central] & 4) != 0
    assert central.sum() > 300 and stored.sum() > 100
    assert (computed == stored).mean() > 0.99, f"{(computed != stored).sum()} of {central.sum()} jets disagree"


# Every shared file in one campaign: simulation by process (Run 3 simulation with its era in the spec), collision
# data (no xsec) of Run 2 and Run 3 together.
CAMPAIGN = {
    "ttbar": [
        "nanoAOD_2015_CMS_Open_Data_ttbar.root",
        RNTUPLE_2015,
        "nano_dy.root",
        "nano_dy_rntuple.root",
        "pfnano.root",
        "ttH_M125_2017.root",
    ],
    "ggH": ["ggH_M125_amcatnlo_v13.root"],
    "tt_run3": ["nano_tt_v15.root"],
    "data": ["nano_dimuon.root", "EGamma_F_Skim.root", "DYto2E.root"],
}
XSEC = {"ttbar": 729.84, "ggH": 48.6, "tt_run3": 923.6}


@pytest.mark.parametrize("recompress", ["off", "zstd:5"])
def test_a_campaign_over_every_shared_file_gives_coffeas_histograms(nanoaod, bench, snakemake, tmp_path, recompress):
    """The workflow end to end (Snakemake, the per-batch index, the merge tree, the report) over every file of
    ../shared/nanoaod, as they are and recompressed to ZSTD: every file counted once, and each histogram of
    histograms.root equal, bin by bin with flow, to the sum of coffea's recomputations of its process's files."""
    assert sorted(n for names in CAMPAIGN.values() for n in names) == sorted(FILES)
    spec, entries = {}, {}
    for process, names in CAMPAIGN.items():
        files = []
        for name in names:
            entries[name] = num_entries(nanoaod / name)
            files.append({"path": str(nanoaod / name), "nevts": entries[name]})
        spec[process] = {"nominal": {"nevts_total": sum(entries[n] for n in names), "files": files}}
        if process in XSEC:
            spec[process]["xsec"] = XSEC[process]
        forced = {FILES[n][0] for n in names} - {None}
        if forced:
            (spec[process]["era"],) = forced
    (tmp_path / "spec.json").write_text(json.dumps(spec))

    done = snakemake(tmp_path, f"dataset={tmp_path / 'spec.json'}", "campaign=real", f"recompress={recompress}")
    assert done.returncode == 0, done.stderr[-4000:]
    out = tmp_path / "results" / "real"
    report = json.loads((out / "report.json").read_text())
    assert report["complete"] and report["files"] == {"total": 11, "ok": 11, "failed": 0}, report["failed_files"]
    assert report["events"] == sum(entries.values())
    if recompress != "off":
        assert all(
            r["recompress"]["codec"] == "zstd:5" and "recompressed" in r["read_from"] for r in report["inputs"]
        ), report["inputs"]

    with uproot.open(out / "histograms.root") as got:
        expected = {
            f"{region}_{process}_{variation}"
            for process in CAMPAIGN
            for region in analysis.REGIONS
            for variation in analysis.variations(process, "nominal", data=process not in XSEC)
        }
        assert {k.split(";")[0] for k in got.keys() if not k.startswith("events_")} == expected
        assert all(got[f"{region}_ttbar_nominal"].values().sum() > 0 for region in analysis.REGIONS)  # ttH fills
        for process, names in CAMPAIGN.items():
            weight = analysis.event_weight(XSEC.get(process), 3378, spec[process]["nominal"]["nevts_total"])
            reference = None
            for name in names:
                _, era, jet_id = FILES[name]
                h, events, _ = bench.coffea_histogram(
                    nanoaod / name, process, weight, eras.Selection(eras.ERAS[era], "test", jet_id)
                )
                assert events == entries[name]
                reference = h if reference is None else reference + h
            for name in expected:
                region, rest = name.split("_", 1)
                if not rest.startswith(f"{process}_"):
                    continue
                want = contents(reference, region, rest[len(process) + 1 :], process)
                have = np.stack([got[name].values(flow=True), got[name].variances(flow=True)])
                np.testing.assert_allclose(have, want, rtol=1e-9, atol=0, err_msg=name)
