"""What the tests of user analyses share: a coffea processor hepvine has never seen (``NEW_PROCESSOR``, the text of
a user's file), coffea's own ``processor.Runner`` over a fileset (the reference), the comparison of two outputs bin by
bin, analyses that fall short of a cut chunk (``CAUGHT``, ``RETURNS``: config ``columns``), and a chunk as coffea's
``NanoEventsFactory.from_root`` makes it (``runner_chunk``), with a schema that counts its runs (``Counted``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from coffea import processor as coffea_processor
from coffea.nanoevents import NanoAODSchema, NanoEventsFactory

CHUNKSIZE = 30  # several chunks per file (the real files of ../shared/nanoaod hold 40 to 1,000 events)

# A processor hepvine has never seen: collections, metadata, a 1-D, a 2-D and a category histogram, sets, numbers,
# an accumulator class of its own.
NEW_PROCESSOR = """
import awkward as ak
import hist
from coffea import processor


class Tally:  # an accumulator of the user's own (coffea adds it with +): the merges and the report unpickle it

    def __init__(self, n=0):
        self.n = n

    def __add__(self, other):
        return Tally(self.n + other.n)

    def __eq__(self, other):  # the same class however the analysis was named (its file, or a module of a package)
        return type(other).__qualname__ == "Tally" and other.n == self.n


class JetsAndMuons(processor.ProcessorABC):
    def __init__(self, pt_min=20.0, fail_on=None):
        self.pt_min = pt_min
        self.fail_on = fail_on

    def process(self, events):
        meta = events.metadata
        if self.fail_on and meta["filename"].endswith(self.fail_on):
            raise RuntimeError("this file breaks my analysis")
        jets = events.Jet[events.Jet.pt > self.pt_min]
        pt = hist.Hist(hist.axis.Regular(20, 0, 400, name="pt"), storage=hist.storage.Weight())
        pt.fill(pt=ak.flatten(jets.pt))
        etaphi = hist.Hist(hist.axis.Regular(10, -2.5, 2.5, name="eta"), hist.axis.Regular(8, -3.2, 3.2, name="phi"))
        etaphi.fill(eta=ak.flatten(jets.eta), phi=ak.flatten(jets.phi))
        njets = hist.Hist(hist.axis.StrCategory([], name="dataset", growth=True), hist.axis.Integer(0, 10, name="n"))
        njets.fill(dataset=meta["dataset"], n=ak.num(jets))
        return {meta["dataset"]: {"jet_pt": pt, "jet_etaphi": etaphi, "events": len(events),
                                  "tally": Tally(len(events)), "muons": int(ak.sum(ak.num(events.Muon))),
                                  "chunks": {(meta["filename"].rsplit("/", 1)[-1], meta["entrystart"],
                                              meta["entrystop"], meta.get("kind", "-"))}},
                "njets": njets}

    def postprocess(self, accumulator):
        accumulator["datasets"] = sorted(k for k in accumulator if k != "njets")
        return accumulator
"""


def assert_same(ours, theirs, where="output"):
    """OURS equals THEIRS (coffea's): same keys and types; histograms bin by bin (flow included), numbers, sets."""
    import hist

    # The same type; a class of the analysis's own by name (its module is named after how the analysis was given).
    assert type(ours) is type(theirs) or type(ours).__qualname__ == type(theirs).__qualname__ == "Tally", where
    if isinstance(theirs, dict):
        assert sorted(map(str, ours)) == sorted(map(str, theirs)), where
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(theirs, hist.Hist):
        assert ours.axes == theirs.axes, where
        np.testing.assert_allclose(ours.values(flow=True), theirs.values(flow=True), rtol=1e-12, err_msg=where)
        if theirs.variances() is not None:
            np.testing.assert_allclose(
                ours.variances(flow=True), theirs.variances(flow=True), rtol=1e-12, err_msg=where
            )
    else:
        assert ours == theirs, where


def fileset_in(directory: Path, doc: dict) -> dict:
    """DOC with its file names as paths in DIRECTORY."""
    out = {}
    for key, value in doc.items():
        if isinstance(value, list):
            out[key] = [str(directory / name) for name in value]
        else:
            out[key] = {**value, "files": {str(directory / name): tree for name, tree in value["files"].items()}}
    return out


def coffea_runner(fileset: dict, instance, chunksize: int = CHUNKSIZE):
    """coffea's own Runner (IterativeExecutor, NanoAODSchema) over FILESET, with a metadata cache of its own: the
    Runner's default one lives as long as the process and keeps the metadata a file's dataset had in an earlier call
    (another test's fileset, in the same pytest worker)."""
    runner = coffea_processor.Runner(
        executor=coffea_processor.IterativeExecutor(), schema=NanoAODSchema, chunksize=chunksize, metadata_cache={}
    )
    return runner(fileset, instance, treename="Events")


# Reads the muons after a file's first chunk, catching what that raises: the Runner's events have muons.
CAUGHT = """
import awkward as ak


def f(events):
    out = {"jets": int(ak.sum(ak.num(events.Jet.pt)))}
    if events.metadata["entrystart"] > 0:
        try:
            out["muons"] = int(ak.sum(ak.num(events.Muon.pt)))
        except Exception:
            out["muons"] = -1
    return out
"""

# Returns arrays of the events themselves (their placeholders with them): in a dict, and in an object of its own.
RETURNS = """
import awkward as ak


class Holder:
    def __init__(self, held):
        self.held = held


def first(events):
    return {"jets": int(ak.sum(ak.num(events.Jet.pt))), "first": events[:1]}


def held(events):
    return {"jets": int(ak.sum(ak.num(events.Jet.pt))), "taus": [Holder(events.Tau)]}


def layout(events):
    return {"jets": int(ak.sum(ak.num(events.Jet.pt))), "layout": events[:2].layout}
"""


def runner_chunk(f, schema, metadata: dict, start: int, stop: int, preload=None):
    """The chunk of entries START to STOP of the tree Events of the opened file F, as the Runner makes it."""
    return NanoEventsFactory.from_root(
        file=f,
        treepath="Events",
        schemaclass=schema,
        metadata=metadata,
        mode="virtual",
        entry_start=start,
        entry_stop=stop,
        preload=preload,
    ).events()


RUNS = []  # Counted's runs (not a class attribute: that would be a setting of the schema)


class Counted(NanoAODSchema):
    """NanoAODSchema, counting the times it runs (``RUNS``)."""

    def __init__(self, base_form, version="latest"):
        RUNS.append(self)
        super().__init__(base_form, version)
