"""hepvine's per-file analysis on every real NanoAOD file of ../shared/nanoaod (Run 2 and Run 3, simulation and
collision data, TTree and RNTuple) decides the expected era and gives, bin by bin, the histograms of an independent
recomputation of the same selection with coffea's NanoEvents (the reference of benchmarks/analysis.py).

The files stay where they are (never copied into the repository): ``$HEPVINE_NANOAOD`` or ``<checkout>/../shared/
nanoaod``. Most of them select few or no events; ``ttH_M125_2017.root`` fills both regions and is asserted to.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import uproot

from hepvine import analysis, driver, eras, fetch

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
        pytest.fail(f"the real NanoAOD files are not at {where}: set HEPVINE_NANOAOD to their directory (inside the "
                    "sandbox, ../shared must be visible)")
    return where


@pytest.fixture(scope="module")
def bench():
    """benchmarks/analysis.py, whose coffea_histogram is the reference."""
    spec = importlib.util.spec_from_file_location("bench_analysis", CHECKOUT / "benchmarks" / "analysis.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def entry(path: Path, era: str | None, nevts: int) -> dict:
    return {"fid": f"real/nominal/{path.stem}", "path": str(path), "process": "real", "variation": "nominal",
            "index": 0, "nevts": nevts, "nevts_total": nevts, "xsec": 2.0, "era": era,
            "route": fetch.local_route(str(path))}


def test_every_shared_file_is_covered(nanoaod, bench):
    assert sorted(p.name for p in nanoaod.glob("*.root")) == sorted(FILES)
    assert bench.REAL_SPEC_ERAS == {name: forced for name, (forced, _, _) in FILES.items() if forced}


@pytest.mark.parametrize("name", sorted(FILES))
def test_hepvine_equals_coffea(nanoaod, bench, name):
    forced, expected_era, jet_id = FILES[name]
    path = nanoaod / name
    entries = uproot.open(path)["Events"].num_entries
    record, h = driver.run_file(entry(path, forced, entries), "test", lumi_pb=3378)
    assert record.failure is None, record.error
    assert record.events == entries
    assert record.era.split()[0] == expected_era and ("(by spec;" in record.era) == bool(forced), record.era
    assert record.era.endswith(f"jet ID from {jet_id})"), record.era

    weight = analysis.event_weight(2.0, 3378, entries)
    selection = eras.Selection(eras.ERAS[expected_era], "test", jet_id)
    reference, events, counts = bench.coffea_histogram(path, "real", weight, selection)
    assert events == entries
    if name == "ttH_M125_2017.root":  # the one file where the Run 2 selection fills both regions
        assert counts["4j1b"] > 0 and counts["4j2b"] > 0
    for region in analysis.REGIONS:
        for variation in analysis.variations("real", "nominal", data=False):
            got, want = contents(h, region, variation), contents(reference, region, variation)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=f"{name} {region} {variation}")


def contents(h, region: str, variation: str) -> np.ndarray:
    """(values, variances) with flow of H's process 'real' (zeros where nothing was filled: no category then)."""
    if "real" not in h.axes["process"]:
        return np.zeros((2, h.axes["observable"].size + 2))
    one = h[{"region": region, "process": "real", "variation": variation}]
    return np.stack([one.values(flow=True), one.variances(flow=True)])


def read(path: Path, branches: list[str]) -> ak.Array:
    return uproot.open(path)["Events"].arrays(branches, library="ak")


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
