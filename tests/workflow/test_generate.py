"""``hepvine generate``'s nanoaod schema with real uproot, ROOT and coffea: a generated file has the trees, branches,
types and counters of the committed description (hepvine.devtools.nanoschema), which still matches the real file it was
taken from; collision data lacks what real data lacks; the analysis and coffea's NanoEvents read it and select the
same events; its values compress like real ones, not like zeros; and the selection's stages on generated ttbar match
the AGC's real 2015 ttbar file.

The real files stay in ../shared/nanoaod (``$HEPVINE_NANOAOD`` elsewhere). One generated file (2,000 ttbar events,
LZMA-9) serves the module: uproot needs ~25 s to lay out a 1,600-branch tree, twice; it is kept between runs while
generate's sources and libraries are unchanged (tests/kept.py). ``hepvine generate`` itself writes a compact file
here every run.
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
from kept import generated_file

from hepvine.devtools import demo, generate, nanoschema
from hepvine.examples import agc as analysis
from hepvine.jobs import driver
from hepvine.model import eras
from hepvine.work import recompress

CHECKOUT = Path(__file__).resolve().parents[2]
NANOAOD = Path(os.environ.get("HEPVINE_NANOAOD") or CHECKOUT.parent / "shared" / "nanoaod")
EVENTS = 2000


def load(script: str):
    spec = importlib.util.spec_from_file_location(Path(script).stem, CHECKOUT / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def real(name: str) -> Path:
    path = NANOAOD / name
    if not path.exists():
        pytest.fail(
            f"the real NanoAOD file {path} is missing: set HEPVINE_NANOAOD to the directory of "
            "../shared/nanoaod (inside the sandbox, ../shared must be visible)"
        )
    return path


@pytest.fixture(scope="module")
def ttbar(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("generated") / "ttbar.root"
    generated_file(path, "ttbar", EVENTS, index=0, seed=7, schema="nanoaod", compression=uproot.LZMA(9))
    return path


def layout(tree) -> list[tuple[str, str, str | None]]:
    """(name, numpy type, counter) of every branch of TREE as uproot reads it, in file order."""
    out = []
    for branch in tree.values():
        interpretation = branch.interpretation
        content = getattr(interpretation, "content", interpretation)
        count = branch.member("fLeaves")[0].member("fLeafCount")
        out.append(
            (
                branch.name,
                content.from_dtype.newbyteorder("=").str.lstrip("<>|="),
                None if count is None else count.member("fName"),
            )
        )
    return out


def described(branches: list[tuple]) -> list[tuple[str, str, str | None]]:
    return [(name, dtype, None if counter == "counter" else counter) for name, dtype, counter, _ in branches]


def test_the_description_matches_its_real_source():
    """The committed description is the extractor's reading of the real file it names (names, types, counters)."""
    extract = load("benchmarks/extract_nanoschema.py")
    with uproot.open(real(nanoschema.SOURCE)) as f:
        for tree, branches in nanoschema.TREES.items():
            assert described(extract.describe(f[tree])) == described(branches), tree
        assert str(f["tag"]) == nanoschema.TAG
    assert len(nanoschema.TREES["Events"]) > 1000


def test_generated_file_has_the_schema(ttbar):
    with uproot.open(ttbar) as f:
        assert f.classnames(cycle=False) == {
            "tag": "TObjString",
            "Events": "TTree",
            "Runs": "TTree",
            "LuminosityBlocks": "TTree",
        }
        assert str(f["tag"]) == nanoschema.TAG
        for tree, branches in nanoschema.TREES.items():
            assert layout(f[tree]) == described(branches), tree
        events = f["Events"]
        assert events.num_entries == EVENTS
        assert str(events["nJet"].interpretation) == "AsDtype('>u4')"  # unsigned, as CMSSW writes counters
        assert events["LHEPdfWeight"].member("fLeaves")[0].member("fLeafCount").member("fName") == "nLHEPdfWeight"
        runs = f["Runs"].arrays(library="np")
        assert runs["genEventCount"].tolist() == [EVENTS]
        assert runs["genEventSumw"][0] == pytest.approx(float(events["genWeight"].array(library="np").sum()))
        lumis = f["LuminosityBlocks"].arrays(library="np")["luminosityBlock"]
        assert sorted(lumis) == sorted(set(events["luminosityBlock"].array(library="np")))
        # Cross-references point at objects of their event.
        jets, electrons = events["Jet_electronIdx1"].array(), events["nElectron"].array()
        assert ak.all(jets < electrons) and ak.any(jets >= 0)


def test_values_compress_like_real_ones(ttbar):
    """Neither trivially compressible (zeros) nor incompressible (random bits): real NanoAOD keeps ~half its size
    under LZMA-9 at this basket size (ttH_M125_2017.root: 0.49)."""
    with uproot.open(ttbar) as f:
        branches = f["Events"].values()
        ratio = sum(b.member("fZipBytes") for b in branches) / sum(b.member("fTotBytes") for b in branches)
        assert 0.15 < ratio < 0.6, ratio
        pt = f["Events"]["Jet_pt"].array(library="np")
    mantissa = np.concatenate(pt).view(np.uint32) & 0x7FFFFF
    assert (mantissa & 0x1FFF == 0).all() and len(np.unique(mantissa)) > 100  # 10 bits kept, as NanoAOD does


def test_analysis_and_coffea_select_the_same_events(ttbar):
    """The driver with the default analysis (TtbarProcessor) on a generated nanoaod file decides Run 2 by its
    branches and fills, histogram by histogram, what coffea's reference (benchmarks/analysis.py) fills."""
    bench = load("benchmarks/analysis.py")
    record, out = driver.run_file(bench.shard_entry(ttbar, "ttbar", EVENTS, 729.84), "test", bench.agc())
    assert record.failure is None, record.error
    assert record.events == EVENTS
    from coffea.nanoevents import NanoAODSchema, NanoEventsFactory

    events = NanoEventsFactory.from_root(
        {str(ttbar): "Events"},
        schemaclass=NanoAODSchema,
        mode="virtual",
        metadata={"filename": str(ttbar), "era": None},
    ).events()
    assert analysis.file_selection(events, analysis.Branches(events)).describe().startswith("run2 (by branches")
    # The branch names read off the layout are those of the events' arrays, field by field; of events cut (an indexed
    # layout) too.
    names = analysis.Branches(events).names()
    by_field = {f"{name}_{f}" for name in events.fields for f in ak.fields(events[name])} | set(events.fields)
    assert names == by_field and {"Jet_pt", "Muon_tightId", "run"} <= names
    assert analysis.Branches(events[ak.num(events.Jet) > 4]).names() == names
    weight = analysis.event_weight(729.84, 3378, EVENTS)
    selected = sum(out[f"{region}_ttbar_nominal"].values(flow=True).sum() for region in analysis.REGIONS)
    assert selected > 0, "the ttbar selection selected nothing"
    reference, events, counts = bench.coffea_histogram(ttbar, "ttbar", weight)
    assert events == EVENTS
    for region in analysis.REGIONS:
        for variation in analysis.variations("ttbar", "nominal", data=False):
            want = reference[{"region": region, "process": "ttbar", "variation": variation}]
            np.testing.assert_allclose(
                out[f"{region}_ttbar_{variation}"].values(flow=True),
                want.values(flow=True),
                rtol=1e-12,
                atol=0,
                err_msg=f"{region} {variation}",
            )
    assert sum(counts.values()) == round(selected / weight)


def test_root_copies_it_faithfully(ttbar, tmp_path):
    """ROOT (hadd, in hepvine.work.recompress) reads the uproot-written file, unsigned counters and all, and the copy
    passes recompress's full comparison with the source."""
    entries, _ = recompress.recompress(str(ttbar), tmp_path / "copy.root", recompress.parse_codec("zstd:5"))
    assert entries["Events"] == EVENTS


def test_collision_data_lacks_generator_branches():
    """Generated data drops exactly the branches real collision data has not (checked against nano_dimuon.root,
    2018 data of another NanoAOD version: none of its branches is dropped), and its run decides its era."""
    with uproot.open(real("nano_dimuon.root")) as f:
        in_real_data = set(f["Events"].keys())
    dropped = {name for name, *_ in nanoschema.TREES["Events"]} - {
        name for name, *_ in generate.schema_branches("Events", data=True)
    }
    assert {"genWeight", "nGenPart", "GenPart_pt", "Jet_hadronFlavour", "LHEPdfWeight", "Pileup_nPU"} <= dropped
    assert not dropped & in_real_data
    assert [name for name, *_ in generate.schema_branches("Runs", data=True)] == ["run"]
    chunk = generate.nanoaod_events("data", 100, np.random.default_rng(1), 0)
    assert "genWeight" not in chunk
    era, decided_by = eras.era_of("data.root", set(chunk), first_run=int(chunk["run"][0]))
    assert era.name == "run2" and decided_by == f"run {generate.DATA_RUN}"


def stages(events) -> dict[str, float]:
    """Fractions of events with one selected lepton, with four selected jets, and selected (either region)."""
    e = (
        (events["Electron_pt"] > 30)
        & (abs(events["Electron_eta"]) < 2.1)
        & (events["Electron_cutBased"] == 4)
        & (events["Electron_sip3d"] < 4)
    )
    m = (
        (events["Muon_pt"] > 30)
        & (abs(events["Muon_eta"]) < 2.1)
        & events["Muon_tightId"]
        & (events["Muon_sip3d"] < 4)
        & (events["Muon_pfRelIso04_all"] < 0.15)
    )
    jets = (events["Jet_pt"] > 30) & (abs(events["Jet_eta"]) < 2.4) & ((events["Jet_jetId"] & 4) != 0)
    counts = analysis.fill(analysis.new_histogram(), events, "x", 1.0)
    return {
        "one_lepton": float(ak.mean((ak.sum(e, axis=1) + ak.sum(m, axis=1)) == 1)),
        "four_jets": float(ak.mean(ak.sum(jets, axis=1) >= 4)),
        "selected": sum(counts.values()) / len(events),
    }


def test_ttbar_selection_stages_match_the_real_ttbar_file():
    """The AGC's own 2015 ttbar file (200 events): 7% of events with one selected lepton, 1% with four selected jets,
    none selected (95% upper limit 1.5%). Generated ttbar: within 2% of each, and some selected."""
    with uproot.open(real("nanoAOD_2015_CMS_Open_Data_ttbar.root")) as f:
        want = stages(f["Events"].arrays(analysis.BRANCHES))
    chunk = generate.nanoaod_events("ttbar", 20_000, np.random.default_rng(3), 0)
    got = stages(ak.Array({name: chunk[name] for name in analysis.BRANCHES}))
    assert abs(got["one_lepton"] - want["one_lepton"]) < 0.02, (got, want)
    assert abs(got["four_jets"] - want["four_jets"]) < 0.02, (got, want)
    assert 0.0005 < got["selected"] < 0.015 and want["selected"] < 0.015, (got, want)


def test_the_demos_physics_in_the_real_layout_fills_the_selection():
    """The demo's files (nanoaod layout, compact physics): the layout's branches, types and counters are those of the
    realistic files, and the selection fills ~50x as densely (3.9% of ttbar events; realistic 0.08-0.16%)."""
    assert demo.SCHEMA == "nanoaod"
    rng = np.random.default_rng(5)
    dense, realistic = (generate.nanoaod_events("ttbar", 5_000, rng, 0, physics=p) for p in (demo.PHYSICS, "nanoaod"))
    assert list(dense) == list(realistic)
    assert all(
        ak.type(dense[name]) == ak.type(realistic[name])
        if isinstance(dense[name], ak.Array)
        else dense[name].dtype == realistic[name].dtype
        for name in dense
    )
    select = {
        name: stages(ak.Array({b: chunk[b] for b in analysis.BRANCHES}))["selected"]
        for name, chunk in (("dense", dense), ("realistic", realistic))
    }
    assert select["dense"] > 0.02 and select["dense"] > 20 * select["realistic"], select
    with pytest.raises(ValueError, match="unknown physics 'dense'"):
        generate.write_file(Path("never-written.root"), "ttbar", 1, physics="dense")


def test_command_writes_the_chosen_schema(tmp_path):
    spec_path = tmp_path / "spec.json"
    assert (
        generate.main(
            [
                str(tmp_path / "data"),
                "--files",
                "1",
                "--events",
                "300",
                "--processes",
                "wjets",
                "--schema",
                "compact",
                "--spec",
                str(spec_path),
            ]
        )
        == 0
    )
    spec = json.loads(spec_path.read_text())
    (entry,) = spec["wjets"]["nominal"]["files"]
    with uproot.open(entry["path"]) as f:
        assert f["Events"].num_entries == 300 and "Jet_filler0" in f["Events"].keys()
        assert f.file.compression == uproot.LZMA(9)
    assert (
        generate.main(
            [
                str(tmp_path / "one"),
                "--files",
                "1",
                "--events",
                "300",
                "--processes",
                "wjets",
                "--lzma-level",
                "1",
                "--spec",
                str(spec_path),
            ]
        )
        == 0
    )
    (entry,) = json.loads(spec_path.read_text())["wjets"]["nominal"]["files"]
    with uproot.open(entry["path"]) as f:
        assert f.file.compression == uproot.LZMA(1)
    with pytest.raises(SystemExit):
        generate.main([str(tmp_path / "x"), "--schema", "nano"])
