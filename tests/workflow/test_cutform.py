"""config ``columns: traced`` (``hepvine.work.cutform``): a chunk's fields the analysis does not read are placeholders,
the ones it reads made as coffea's Runner makes them. Checked against the Runner over a fileset of real NanoAOD (Run 2
and 3, MC and data, TTree and RNTuple); ``events.fields`` and each field's ``.fields`` are the Runner's; a field the
trace missed fails its file loudly, naming the field and the fix; where the cut would change a field's form there is
none."""

from __future__ import annotations

import collections
import copy
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import awkward as ak
import numpy as np
import pyarrow
import pytest
import uproot
from coffea.nanoevents import NanoAODSchema
from processors import (
    CAUGHT,
    CHUNKSIZE,
    NEW_PROCESSOR,
    RETURNS,
    RUNS,
    Counted,
    assert_same,
    coffea_runner,
    fileset_in,
    runner_chunk,
)

from hepvine.examples import agc
from hepvine.model import dataset
from hepvine.model.records import AnalysisError
from hepvine.reading import failures
from hepvine.work import cutform, nanoevents, processor

NANOAOD = Path(__file__).resolve().parents[3] / "shared" / "nanoaod"
# Run 2 MC (LZMA), Run 3 MC v13, NanoAOD v15, RNTuple, Run 2 and Run 3 collision data.
FILESET = {
    "/TTHtoGG_M125/RunIIFall17NanoAODv7-PU2017_12Apr2018/NANOAODSIM": {"files": {"ttH_M125_2017.root": "Events"}},
    "run3_mc": {"files": {"ggH_M125_amcatnlo_v13.root": "Events", "nano_tt_v15.root": "Events"}},
    "rntuple": {"files": {"nano_dy_rntuple.root": "Events"}},
    "data": ["nano_dimuon.root", "EGamma_F_Skim.root"],
}

# Reads the jets' pt only, and says what fields its events had: the top-level ones and each one's own.
FIELDS = """
import awkward as ak


def f(events):
    names = {f"{name}.{sub}" for name in events.fields for sub in events[name].fields} | set(events.fields)
    return {"fields": names, "genWeight": "genWeight" in events.fields, "jets": int(ak.sum(ak.num(events.Jet.pt)))}
"""

# Reads the muons only after a file's first chunk: its trace (on an empty chunk at entry 0) does not see them.
SOMETIMES = """
import awkward as ak


def f(events):
    if events.metadata["entrystart"] > 0:
        return {"muons": int(ak.sum(ak.num(events.Muon.pt)))}
    return {"jets": int(ak.sum(ak.num(events.Jet.pt)))}
"""

# Reads the low-pT electrons where a file has them: the data's second file does, its first does not.
WHERE_THERE = """
import awkward as ak


def f(events):
    out = {"muons": int(ak.sum(ak.num(events.Muon.pt)))}
    if "LowPtElectron" in events.fields:
        out["low_pt_electrons"] = int(ak.sum(ak.num(events.LowPtElectron.pt)))
    return out
"""


def run(analysis, doc: dict):
    """ANALYSIS over every file of the fileset DOC: (the accumulated output, {file name: its output})."""
    from coffea.processor import accumulate

    total, each = None, {}
    for task in dataset.tasks(doc):
        output, events, _ = processor.run_file(task.path, task, analysis)
        assert events == uproot.open(task.path)[task.treename].num_entries
        each[Path(task.path).name] = copy.deepcopy(output)  # (accumulate adds into the first)
        total = output if total is None else accumulate([output], total)
    return total, each


@pytest.mark.slow  # (~40 s, make test's; make check compares the default's cut with coffea per file: test_real_nanoaod)
def test_columns_traced_gives_the_runners_output_and_fields(tmp_path):
    (tmp_path / "mine.py").write_text(NEW_PROCESSOR)
    (tmp_path / "fields.py").write_text(FIELDS)
    doc = fileset_in(NANOAOD, FILESET)
    cut = processor.load(f"{tmp_path}/mine.py:JetsAndMuons", {"pt_min": 25.0}, chunksize=CHUNKSIZE, columns="traced")
    with pytest.warns(UserWarning, match="nano_dy_rntuple.root: every field made, none cut .*not a tree of plain"):
        ours, _ = run(cut, doc)
    # Each dataset traced once a layout, local files too: run3_mc's two files differ, and the data's.
    assert {key[:2] for key in cut.traced} == {(name, "Events") for name in doc} and all(cut.traced.values())
    assert len(cut.traced) == 6
    cuts = [v for v in cut.forms.values() if isinstance(v, cutform.Cut)]
    assert cuts and all(len(c.unread) > 10 for c in cuts)  # the plain trees' chunks were cut
    theirs = coffea_runner(doc, processor.load(f"{tmp_path}/mine.py:JetsAndMuons", {"pt_min": 25.0}).instance)
    assert_same(cut.postprocess(ours), theirs)

    _, traced = run(processor.load(f"{tmp_path}/fields.py:f", chunksize=CHUNKSIZE, columns="traced"), doc)
    _, every = run(processor.load(f"{tmp_path}/fields.py:f", chunksize=CHUNKSIZE, columns="all"), doc)
    assert traced == every
    assert every["ttH_M125_2017.root"]["genWeight"] and not every["nano_dimuon.root"]["genWeight"]
    assert "Tau.pt" in every["ttH_M125_2017.root"]["fields"]


def test_a_field_the_trace_missed_fails_its_file_naming_it_and_the_fix(tmp_path):
    (tmp_path / "sometimes.py").write_text(SOMETIMES)
    sometimes = processor.load(f"{tmp_path}/sometimes.py:f", chunksize=CHUNKSIZE, columns="traced")
    doc = fileset_in(NANOAOD, FILESET)
    task = next(t for t in dataset.tasks(doc) if t.path.endswith("ttH_M125_2017.root"))
    with pytest.raises(
        AnalysisError,
        match=r"NotRead: events.Muon.pt: hepvine made these events without Muon.*"
        r"run with columns: all",
    ) as raised:
        processor.run_file(task.path, task, sometimes)
    assert "sometimes.py:7" in raised.value.where  # the user's line
    assert "set config columns: auto" in failures.classify(raised.value).fix
    every = processor.load(f"{tmp_path}/sometimes.py:f", chunksize=CHUNKSIZE, columns="all")
    out, _, _ = processor.run_file(task.path, task, every)
    assert out["muons"] > 0  # with every field, as the Runner
    with pytest.raises(processor.AnalysisSpecError, match="columns='some': use one of auto, all, traced"):
        processor.load(f"{tmp_path}/sometimes.py:f", columns="some")


def test_a_not_read_the_analysis_catches_or_a_placeholder_it_returns_fails_its_file(tmp_path):
    """What would otherwise differ silently from the Runner's output: a NotRead caught by the analysis (its output
    would say -1 muons), a placeholder returned (it would pickle as empty records)."""
    (tmp_path / "caught.py").write_text(CAUGHT)
    (tmp_path / "returns.py").write_text(RETURNS)
    doc = fileset_in(NANOAOD, FILESET)
    task = next(t for t in dataset.tasks(doc) if t.path.endswith("ttH_M125_2017.root"))
    caught = processor.load(f"{tmp_path}/caught.py:f", chunksize=CHUNKSIZE, columns="traced")
    with pytest.raises(AnalysisError, match=r"caught NotRead: events.Muon.pt: hepvine made these events without") as e:
        processor.run_file(task.path, task, caught)
    assert "caught.py:9" in e.value.where  # where the user's code used it
    every, _, _ = processor.run_file(
        task.path, task, processor.load(f"{tmp_path}/caught.py:f", chunksize=CHUNKSIZE, columns="all")
    )
    assert every["muons"] > 0
    # A NotRead the analysis did not catch fails its file; the next file's chunks are not blamed for it.
    (tmp_path / "sometimes.py").write_text(SOMETIMES)
    sometimes = processor.load(f"{tmp_path}/sometimes.py:f", chunksize=CHUNKSIZE, columns="traced")
    with pytest.raises(AnalysisError, match="raised NotRead"):
        processor.run_file(task.path, task, sometimes)
    other = next(t for t in dataset.tasks(doc) if t.path.endswith("ggH_M125_amcatnlo_v13.root"))
    one_chunk = processor.load(f"{tmp_path}/sometimes.py:f", chunksize=10**9, columns="traced")
    one_chunk.traced, one_chunk.forms = sometimes.traced, sometimes.forms
    assert processor.run_file(other.path, other, one_chunk)[0]["jets"] > 0
    for name, field in (("first", "[A-Za-z]+"), ("held", "Tau"), ("layout", "[A-Za-z]+")):
        returns = processor.load(f"{tmp_path}/returns.py:{name}", chunksize=CHUNKSIZE, columns="traced")
        with pytest.raises(AnalysisError, match=rf"returned a field not made: events.{field}.*columns: all"):
            processor.run_file(task.path, task, returns)


def test_a_dataset_of_two_layouts_is_traced_in_each(tmp_path):
    """An analysis that reads a field only where a file has it: traced once a layout, it reads it where it is."""
    (tmp_path / "there.py").write_text(WHERE_THERE)
    doc = fileset_in(NANOAOD, {"data": FILESET["data"]})
    there = processor.load(f"{tmp_path}/there.py:f", chunksize=CHUNKSIZE, columns="traced")
    ours, each = run(there, doc)
    assert "low_pt_electrons" in each["EGamma_F_Skim.root"] and "low_pt_electrons" not in each["nano_dimuon.root"]
    assert len(there.traced) == 2 and all(isinstance(v, cutform.Cut) for k, v in there.forms.items() if k[0] == "cut")
    assert_same(ours, coffea_runner(doc, processor.load(f"{tmp_path}/there.py:f").instance))


@pytest.fixture
def tth_chunks():
    """The ttH file's chunk of entries 10-60, made with every field and with a cut for a trace reading jets' pt."""
    opened = uproot.open(NANOAOD / "ttH_M125_2017.root")
    every = nanoevents.FileChunks(opened, "Events", NanoAODSchema, {})
    cut = nanoevents.FileChunks(opened, "Events", NanoAODSchema, {})
    assert cut.cut_to(frozenset({"nJet", "Jet_pt"})) is None
    metadata = {"dataset": "d", "filename": "f", "entrystart": 10, "entrystop": 60}
    yield every.events(dict(metadata), 10, 60, None), cut.events(dict(metadata), 10, 60, None)
    opened.close()


def test_a_placeholder_has_its_fields_length_and_fails_at_any_use_of_its_contents(tth_chunks):
    every, cut = tth_chunks
    assert cut.fields == every.fields and cut.metadata == every.metadata and len(cut) == len(every) == 50
    assert ak.array_equal(cut.Jet.pt, every.Jet.pt) and cut.Jet.fields == every.Jet.fields
    assert cut.Jet.layout.form == every.Jet.layout.form  # made as the Runner makes it
    assert isinstance(cut.Tau, cutform.UnreadArray) and not isinstance(cut.Jet, cutform.UnreadArray)
    assert cut.Tau.fields == every.Tau.fields and len(cut.Tau) == 50
    assert cut.genWeight.fields == every.genWeight.fields == []
    masked = cut[cut.event % 2 == 0]  # a placeholder stays one through the events' slices, and one event's
    assert isinstance(masked.Tau, cutform.UnreadArray) and 0 < len(masked.Tau) == len(masked) < 50
    assert repr(masked.Tau).startswith("<UnreadArray events.Tau: not made (config columns: auto or traced); fields ")
    assert str(cut[0].genWeight) == "<UnreadRecord events.genWeight: not made (config columns: auto or traced)>"
    assert isinstance(cut[0].Tau, cutform.UnreadRecord) and cut[0].Tau.fields == every.Tau.fields
    uses = (lambda: cut.Tau.pt, lambda: cut.Tau[0], lambda: list(cut.Tau), lambda: np.asarray(cut.genWeight))
    # Nothing answers silently: awkward's functions, NumPy's, properties, pickling.
    uses += (
        lambda: ak.fields(cut.Tau),
        lambda: ak.type(cut.Tau),
        lambda: ak.without_parameters(cut.Tau),
        lambda: ak.zip({"t": cut.Tau}),
        lambda: ak.num(cut.Tau),
        lambda: cut.Tau.type,
        lambda: cut.Tau.ndim,
        lambda: cut.Tau.to_list(),
        lambda: np.sqrt(cut.genWeight),
        lambda: np.concatenate([cut.genWeight]),
        lambda: pickle.dumps(cut.Tau),
        lambda: cut[0].Tau.type,
        lambda: cut.Jet.matched_gen,  # (coffea's cross-reference calls GenJet._apply_global_index)
        lambda: cut.Tau._anything,
    )
    # The events holding a placeholder, given to a function that would give it out of awkward or strip its mark.
    uses += (
        lambda: ak.to_list(masked),
        lambda: masked.to_list(),
        lambda: ak.to_arrow(cut),
        lambda: ak.to_json(cut[:2]),
        lambda: ak.to_buffers(cut[:3]),
        lambda: ak.to_list(cut[["Jet", "Tau"]]),  # (a selection of fields: a plain array; its placeholder raises)
        lambda: ak.to_list(cut[0]),
        lambda: ak.without_parameters(cut),
        lambda: ak.to_parquet(cut, os.devnull),
        lambda: pyarrow.array(masked),
        lambda: ak.flatten(cut, axis=None),
        lambda: ak.ravel(cut[:2]),
    )
    assert ": {}" in str(cut[0]) and str(cut[:3])  # printed: a placeholder as {} (where the Runner's shows its fields)
    masked_every = every[every.event % 2 == 0]
    assert agc.Branches(masked).names() == agc.Branches(masked_every).names()  # the AGC's names, of masked events
    for use in (*uses, lambda: masked.Tau.pt, lambda: cut[0].Tau.pt):
        with pytest.raises(cutform.NotRead, match="hepvine made these events without "):
            use()
    assert sum(1 for c in cut.layout.contents if c.parameter("__record__") == cutform.UNREAD) > 40


def test_awkwards_other_functions_of_cut_events_work_as_with_every_field(tth_chunks):
    """Given the events, awkward's functions that keep them awkward arrays work as with every field, keeping the
    placeholders what they are; those that give them out of awkward work on events without a placeholder (a
    selection of fields the trace read)."""
    every, cut = tth_chunks
    assert type(cut).__name__ == type(every).__name__ and isinstance(cut, type(every))
    assert isinstance(cut[0], type(every[0]))
    assert ak.num(cut, axis=0) == len(every) and ak.fields(cut) == ak.fields(every)
    both = [ak.with_field(events, events.Jet.pt * 2, "pt2") for events in (cut, every)]
    assert ak.array_equal(both[0].pt2, both[1].pt2) and isinstance(both[0].Tau, cutform.UnreadArray)
    assert ak.to_list(cut[["Jet", "event"]]) == ak.to_list(every[["Jet", "event"]])
    assert ak.to_list(cut[0][["event"]]) == ak.to_list(every[0][["event"]])
    joined = ak.concatenate([cut[:2], cut[5:8]])
    assert len(joined) == 5 and isinstance(joined.Tau, cutform.UnreadArray)
    assert ak.array_equal(ak.to_packed(cut[["Jet"]]).Jet.pt, every.Jet.pt)
    with pytest.raises(cutform.NotRead, match=r"events\.\w+: the events holding it given to ak.to_list; "):
        ak.to_list(joined)
    assert cutform.used() is not None and cutform.used() is None  # remembered, then forgotten


def test_an_array_of_a_cut_chunk_pickles_as_one_of_every_field():
    """An array of a cut chunk's (what an output may hold, sent from the job) pickles where one made with every field
    does (BaseSchema's behaviour can be pickled; NanoAODSchema's cannot, with every field either), arrays made of two
    too (awkward merges their behaviours into a new dict): the events classes made for the cut (``CutEvents``) are
    pickled by a name of hepvine's, under which a process that has not made them makes them."""
    import copy

    from coffea.nanoevents import BaseSchema

    with uproot.open(NANOAOD / "ttH_M125_2017.root") as opened:
        every, cut = (nanoevents.FileChunks(opened, "Events", BaseSchema, {}) for _ in range(2))
        assert cut.cut_to(frozenset({"nJet", "Jet_pt", "Jet_eta"})) is None
        every, cut = (made.events({"dataset": "d"}, 10, 60, None) for made in (every, cut))
        assert isinstance(cut, cutform.CutEvents) and isinstance(copy.deepcopy(cut[:2]), cutform.CutEvents)
        output = {
            "pt": cut.Jet_pt,
            "first": cut[:3][["event"]],
            "zipped": ak.zip({"pt": cut.Jet_pt, "eta": cut.Jet_eta}),
        }
        sent = pickle.dumps(output)
        cutform._events_classes.clear()  # as in another process
        again = pickle.loads(sent)
        assert ak.array_equal(again["pt"], every.Jet_pt) and again["first"].to_list() == every[:3][["event"]].to_list()
        assert ak.array_equal(again["zipped"].eta, every.Jet_eta)
        made_again = again["pt"].behavior[("*", "NanoEvents")]
        assert issubclass(made_again, cutform.CutEvents) and made_again.__name__ == type(every).__name__


def test_a_cuts_chunks_get_what_running_the_schema_gives_with_it_run_once_a_layout_and_trace():
    """The schema's form of a cut is made once for a job's files of its layout and trace (``cutform.built``): each
    chunk of a file opened twice (the second as a job's later file of the layout) has the form and metadata that
    running the schema for it gives (``CutSchema`` without it) and from_root's warnings, as many; the schema ran twice
    (the check) for the first chunk, never again."""
    forms, path, traced = {}, str(NANOAOD / "ttH_M125_2017.root"), frozenset({"nJet", "Jet_pt"})
    runs = []
    for _ in range(2):
        with uproot.open(path) as f:
            made = nanoevents.FileChunks(f, "Events", Counted, forms)
            assert made.cut_to(traced) is None
            for start in (0, 15, 30):
                metadata = {"dataset": "d", "entrystart": start, "entrystop": start + 15, "version": "9"}
                RUNS.clear()
                with warnings.catch_warnings(record=True) as seen:
                    warnings.simplefilter("always")
                    ours = made.events(dict(metadata), start, start + 15, None, traced)
                runs.append(len(RUNS))
                with warnings.catch_warnings(record=True) as given:
                    warnings.simplefilter("always")
                    runner_chunk(f, Counted, dict(metadata), start, start + 15)
                base = pickle.loads(made.cut.base)
                base["parameters"]["metadata"] = dict(metadata)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ran = cutform.CutSchema(base, schema=Counted, cut=made.cut).form
                assert ours.attrs["@form"] == ran and ours.metadata == ran["parameters"]["metadata"]
                assert ours.metadata["version"] == "latest" and isinstance(ours.Tau, cutform.UnreadArray)
                assert collections.Counter((w.category, str(w.message), w.filename, w.lineno) for w in seen) == (
                    collections.Counter((w.category, str(w.message), w.filename, w.lineno) for w in given)
                )
                assert len(seen) >= 5
    assert runs == [2, 0, 0, 0, 0, 0]
    with uproot.open(path) as f:  # another trace of the layout: a cut of its own, whose form is made for it
        made = nanoevents.FileChunks(f, "Events", Counted, forms)
        assert made.cut_to(frozenset({"nMuon", "Muon_pt"})) is None
        RUNS.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            muons = made.events({"dataset": "d"}, 0, 15, None)
        assert len(RUNS) == 2 and isinstance(muons.Jet, cutform.UnreadArray)
        assert not isinstance(muons.Muon, cutform.UnreadArray) and len(muons.Muon.pt) == 15


def test_plan_gives_no_cut_where_a_kept_fields_form_would_differ():
    """A schema whose form of a field depends on branches the cut leaves out: no cut, and why."""

    class Counting(NanoAODSchema):
        def __init__(self, base_form, *args, **kwargs):
            super().__init__(base_form, *args, **kwargs)
            jet = self._form["contents"][self._form["fields"].index("Jet")]
            jet.setdefault("parameters", {})["branches"] = len(base_form["fields"])

    with uproot.open(NANOAOD / "ttH_M125_2017.root") as opened:
        chunks = nanoevents.FileChunks(opened, "Events", Counting, {})
        assert chunks.cut_to(frozenset({"nJet", "Jet_pt"})) == "Jet would differ from the Runner's"
        made = chunks.events({}, 0, 10, None)
        assert chunks._cut is None and made.fields == opened_fields(opened)  # every field made, none a placeholder
        assert not any(c.parameter("__record__") == cutform.UNREAD for c in made.layout.contents)
        assert cutform.plan(pickle.loads(chunks._base_form), NanoAODSchema, frozenset({"x"})) == (
            "the trace found no field read"
        )


def opened_fields(opened) -> list[str]:
    from coffea.nanoevents import NanoEventsFactory

    return NanoEventsFactory.from_root(opened, treepath="Events", mode="virtual").events().fields


def test_a_fields_columns_are_the_branches_its_form_keys_load():
    jet = {
        "class": "ListOffsetArray",
        "offsets": "i64",
        "form_key": "nJet%2C%21load%2C%21counts2offsets",
        "content": {
            "class": "RecordArray",
            "fields": ["pt", "matched_gen"],
            "contents": [
                {"class": "NumpyArray", "primitive": "float32", "form_key": "Jet_pt%2C%21load%2C%21content"},
                {
                    "class": "NumpyArray",
                    "primitive": "int64",
                    "form_key": "Jet_genJetIdx%2C%21load%2CnGenJet%2C%21load%2C%21counts2offsets%2C%21local2global",
                },
            ],
        },
    }
    assert cutform._columns(jet, first=True) == {"nJet", "Jet_pt", "Jet_genJetIdx"}
    assert cutform._columns(jet, first=False) == {"nJet", "Jet_pt", "Jet_genJetIdx", "nGenJet"}
    branches = ["run", "nJet", "Jet_pt", "Jet_eta", "nGenJet", "GenJet_pt", "nMuon", "Muon_pt", "MET_pt"]
    assert cutform._collections(branches, {"Jet_genJetIdx", "nGenJet", "run"}) == {
        "run",
        "nJet",
        "Jet_pt",
        "Jet_eta",
        "nGenJet",
        "GenJet_pt",
    }


# One file through the AGC processor in a fresh process (its warnings as a job's log shows them), then the file again
# in that process as a job's later file (the trace and the cut planned before, in the analysis).
WARNINGS = """
import pickle, sys
from hepvine.examples import agc
from hepvine.model import dataset
from hepvine.work import processor
path, columns = sys.argv[1], sys.argv[2]
agc = processor.load("hepvine.examples.agc:TtbarProcessor", chunksize=30, columns=columns)
metadata = {"era": "run2", "xsec": 1.0, "process": "ttH", "variation": "nominal", "nevts_total": 1000}
task = next(iter(dataset.tasks({"d": {"files": {path: "Events"}, "metadata": metadata}})))
processor.run_file(path, task, agc)
sys.stderr.write("--- again\\n")
processor.run_file(path, task, agc)
"""


def test_a_cut_chunk_gives_the_runners_warnings_only():
    """The schema warns of each cross-reference whose index is missing: of the cut base form it would warn of indices
    the file has (left out with their collections). Those are not given, the file's own are: with columns=traced a
    job's log shows the warnings it shows with every field, as many times."""
    path = str(NANOAOD / "ttH_M125_2017.root")
    logs = {}
    for columns in ("all", "traced"):
        done = subprocess.run(
            [sys.executable, "-c", WARNINGS, path, columns], capture_output=True, text=True, check=True
        )
        logs[columns] = collections.Counter(line for line in done.stderr.splitlines() if "Warning:" in line)
    assert logs["traced"] == logs["all"]  # each as many times
    assert any("Missing cross-reference index" in line for line in logs["all"])  # the file's own, as the Runner's
