"""Eras: which era a file is (spec, tag, run of collision data, branches), what its selection reads, and the failures
when it cannot be decided or a branch is missing — permanent, naming the file, the era and the branch, with a fix that
says what to change. The spec's per-process era is validated and reaches the job's shard. The columnar analysis with a
Run 3 era's discriminant and working point equals the event loop of test_analysis.py."""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest
import uproot
from kept import generated_file
from test_analysis import loop_observables

from hepvine.examples import agc as analysis
from hepvine.model import dataset, eras, records
from hepvine.model.records import FileProblem
from hepvine.reading import failures, fetch
from hepvine.routing import index

RUN2_MC = {"genWeight", "fixedGridRhoFastjetAll", "Jet_btagCSVV2", "Jet_btagDeepFlavB"}
RUN3_MC = {"genWeight", "Rho_fixedGridRhoFastjetAll", "Jet_btagDeepFlavB", "Jet_btagPNetB"}
ALL = set(eras.Selection(eras.ERAS["run2"], "", eras.JET_ID_BIT).branches) | {"Jet_btagDeepFlavB"}


def failure(fn, *args) -> records.Failure:
    with pytest.raises(FileProblem) as e:
        fn(*args)
    found = failures.classify(e.value)
    assert found.failure_class == records.PERMANENT and found.fix.endswith(records.RERUN_FIXED)
    return found


def test_the_spec_decides_first():
    assert eras.era_of("f.root", RUN3_MC, forced="run3-2023BPix", tag="RunIISummer20UL17") == (
        eras.ERAS["run3-2023BPix"],
        "spec",
    )
    found = failure(eras.era_of, "f.root", RUN3_MC, "run4")
    assert found.kind == "unknown-era" and "'run4'" in found.cause and "f.root" in found.cause


@pytest.mark.parametrize(
    "tag, era",
    [
        ("Run3Summer22EENanoAODv12", "run3-2022EE"),
        ("Run3Summer22NanoAODv12", "run3-2022"),
        ("Run3Summer23BPixNanoAODv12", "run3-2023BPix"),
        ("Run2023C", "run3-2023"),
        ("RunIISummer20UL18NanoAODv9", "run2"),
    ],
)
def test_a_tag_naming_a_campaign_decides(tag, era):
    assert eras.era_of("f.root", RUN3_MC, tag=tag) == (eras.ERAS[era], f"tag {tag!r}")


@pytest.mark.parametrize(
    "run, era",
    [
        (246908, "run2"),
        (325175, "run2"),
        (355100, "run3-2022"),
        (359021, "run3-2022"),
        (359022, "run3-2022EE"),
        (362760, "run3-2022EE"),
        (366403, "run3-2023"),
        (369802, "run3-2023"),
        (369803, "run3-2023BPix"),
        (370790, "run3-2023BPix"),
    ],
)
def test_collision_data_by_its_run(run, era):
    assert eras.era_of("d.root", {"Jet_btagDeepFlavB"}, tag="untagged", first_run=run) == (eras.ERAS[era], f"run {run}")


def test_collision_data_of_a_run_no_era_covers():
    found = failure(eras.era_of, "d.root", set(), None, "untagged", 380000)
    assert found.kind == "unknown-era" and "run 380000" in found.cause and "d.root" in found.cause


def test_simulation_by_its_branches():
    assert eras.era_of("s.root", RUN2_MC, tag="untagged") == (eras.ERAS["run2"], "branches")
    found = failure(eras.era_of, "s.root", RUN3_MC, None, "untagged")
    assert found.kind == "unknown-era" and "Run 3 simulation" in found.cause and "s.root" in found.cause
    assert (
        "set `era`" in found.fix
        and all(name in found.fix for name in eras.ERAS)
        and "run the same command again" in found.fix
    )
    assert failure(eras.era_of, "s.root", {"genWeight", "Jet_pt"}).kind == "unknown-era"


def test_selection_branches_and_jet_id():
    run2 = eras.select("f.root", ALL, eras.ERAS["run2"], "branches")
    assert run2.jet_id == eras.JET_ID_BIT and "Jet_btagCSVV2" in run2.branches
    run3 = eras.select("f.root", ALL, eras.ERAS["run3-2022"], "spec")
    assert "Jet_btagDeepFlavB" in run3.branches and "Jet_btagCSVV2" not in run3.branches
    v15 = (ALL - {eras.JET_ID_BIT}) | set(eras.JET_ID_FRACTIONS)
    assert eras.select("f.root", v15, eras.ERAS["run3-2022"], "spec").jet_id == "fractions"


@pytest.mark.parametrize(
    "era, names, missing",
    [
        ("run3-2022EE", ALL - {"Jet_btagDeepFlavB"}, "Jet_btagDeepFlavB"),
        ("run2", ALL - {"Jet_btagCSVV2"}, "Jet_btagCSVV2"),
        ("run2", ALL - {eras.JET_ID_BIT} | set(eras.JET_ID_FRACTIONS), eras.JET_ID_BIT),  # Run 2 has no computed jet ID
        ("run3-2023", ALL - {eras.JET_ID_BIT}, "Jet_neHEF"),  # v15-like, without the fractions either
    ],
)
def test_a_missing_branch_names_file_era_and_branch(era, names, missing):
    found = failure(eras.select, "/store/f.root", names, eras.ERAS[era], "spec")
    assert found.kind == "missing-branch"
    assert f"/store/f.root: era {era} (decided by spec) needs branch {missing}" in found.cause
    assert "set `era`" in found.fix and "replace it or drop it" in found.fix


def spec(era=None) -> dict:
    process = {"xsec": 1.0, "nominal": {"nevts_total": 10, "files": [{"path": "a.root", "nevts": 10}]}}
    if era is not None:
        process["era"] = era
    return {"ttbar": process}


def test_the_spec_era_is_validated_and_reaches_the_shard():
    assert dataset.problems(spec("run3-2022EE")) == []
    (problem,) = dataset.problems(spec("2022EE"))
    assert problem.startswith("ttbar/era: '2022EE' is not an era") and "run3-2022EE" in problem
    (task,) = dataset.tasks(spec("run3-2022EE"))
    assert task.era == "run3-2022EE" and dataset.tasks(spec())[0].era is None
    (batch,) = index.plan([task], 8, fetch.local_route)
    (entry,) = index.shard(batch, {})["files"]
    assert entry["era"] == "run3-2022EE" and index.task(entry) == task


@pytest.mark.parametrize("era", ["run3-2022", "run3-2023"])
def test_run3_discriminant_and_working_point(tmp_path, era):
    """A generated ttbar file with its CSVV2 values as DeepJet: the columnar analysis with a Run 3 era (b tag
    DeepFlavB > the era's WP) equals the event loop with that branch and cut, bin by bin."""
    path = generated_file(tmp_path / "t.root", "ttbar", 3000, index=1, seed=3)["path"]
    events = uproot.open(path)["Events"].arrays(analysis.BRANCHES, library="ak")
    events["Jet_btagDeepFlavB"] = events["Jet_btagCSVV2"] * 0.6  # moves jets across the WPs
    selection = eras.Selection(eras.ERAS[era], "spec", eras.JET_ID_BIT)
    columnar = analysis.new_histogram()
    counts = analysis.fill(columnar, events, "ttbar", 1.0, selection)
    by_hand = analysis.new_histogram()
    plain = {b: events[b].to_list() for b in [*analysis.BRANCHES, "Jet_btagDeepFlavB"]}
    plain["Jet_btagCSVV2"] = plain["Jet_btagDeepFlavB"]
    for variation, scale in analysis.VARIATIONS.items():
        for i in range(len(events)):
            found = loop_observables(plain, i, scale, eras.ERAS[era].btag_wp)
            if found:
                by_hand.fill(region=found[0], process="ttbar", variation=variation, observable=[found[1]], weight=[1.0])
    assert counts["4j1b"] > 10 and counts["4j2b"] > 10
    for variation in analysis.VARIATIONS:
        np.testing.assert_allclose(
            columnar[{"variation": variation}].values(flow=True),
            by_hand[{"variation": variation}].values(flow=True),
            rtol=0,
            atol=1e-9,
        )
    assert ak.sum(events["Jet_btagDeepFlavB"] > eras.ERAS[era].btag_wp) != ak.sum(events["Jet_btagCSVV2"] > 0.5)
