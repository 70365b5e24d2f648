"""A schema's form made once a layout (``hepvine.work.schemaform``), checked against coffea's ``from_root`` on real
NanoAOD: each chunk gets the form, metadata (what the schema writes into it too), warnings and behaviour that the
schema gives when it runs for the chunk, as the Runner runs it; a schema whose form or metadata follow the metadata it
is given runs for every chunk."""

from __future__ import annotations

import warnings
from pathlib import Path

import awkward as ak
import pytest
import uproot
from coffea.nanoevents import BaseSchema, NanoAODSchema
from processors import RUNS, Counted, runner_chunk

from hepvine.work import nanoevents, processor

NANOAOD = Path(__file__).resolve().parents[3] / "shared" / "nanoaod"


def _warned(make, *args) -> tuple[object, list]:
    """(MAKE(*ARGS), the warnings it gave, as shown under the filter "always")."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        made = make(*args)
    return made, [(w.category, str(w.message), w.filename, w.lineno) for w in seen]


@pytest.mark.parametrize("name", ["nano_dy.root", "nano_dy_rntuple.root", "ttH_M125_2017.root"])
def test_each_chunk_gets_the_schemas_form_metadata_and_warnings_with_the_schema_run_once_a_layout(name):
    """Three chunks of a file, opened twice with one job's forms (the second as a second file of its layout would be:
    a TTree's form is kept by layout, an RNTuple's by file): each chunk's form, metadata (with NanoAODSchema's
    ``version``, over the fileset's own), ``@form``, behaviour and warnings (5-6 a chunk) are ``from_root``'s, and its
    columns the same; the schema ran twice (the check) for the first chunk of a TTree's layout, never again, and twice
    for each opening of an RNTuple."""
    RUNS.clear()
    forms, path = {}, str(NANOAOD / name)
    for _ in range(2):
        with uproot.open(path) as f:
            made = nanoevents.FileChunks(f, "Events", Counted, forms)
            steps = processor.chunks(made.tree.num_entries, 15)
            assert len(steps) >= 3
            for start, stop in steps[:3]:
                metadata = {"dataset": "d", "entrystart": start, "entrystop": stop, "version": "9", "xsec": [1.0]}
                ours, our_warnings = _warned(made.events, dict(metadata), start, stop, None)
                theirs, their_warnings = _warned(runner_chunk, f, Counted, dict(metadata), start, stop)
                assert our_warnings == their_warnings and len(their_warnings) >= 5
                assert ours.layout.form == theirs.layout.form and ours.attrs["@form"] == theirs.attrs["@form"]
                assert ours.metadata == theirs.metadata and ours.metadata["version"] == "latest"
                assert type(ours) is type(theirs) and type(ours.Muon) is type(theirs.Muon)
                assert ak.array_equal(ours.Muon.pt, theirs.Muon.pt) and ak.array_equal(ours.event, theirs.event)
    # ours: 2 (the check) for a TTree's layout, or for each RNTuple file; from_root's: one a chunk
    assert len(RUNS) == (2 if "rntuple" not in name else 4) + 2 * 3


def test_under_the_default_filters_a_chunks_warnings_are_shown_as_the_schemas_own():
    """With Python's default filters (each warning once a place), the warnings given again are shown where and as
    often as the schema's own: the first chunk shows them, the next do not, in the first process that makes them."""

    def shown(make_three) -> list:
        with warnings.catch_warnings(record=True) as seen:
            warnings.resetwarnings()
            warnings.simplefilter("default")
            make_three()
        return [(w.category, str(w.message), w.filename, w.lineno) for w in seen]

    path = str(NANOAOD / "nano_dy.root")
    with uproot.open(path) as f:
        made = nanoevents.FileChunks(f, "Events", NanoAODSchema, {})
        ours = shown(lambda: [made.events({}, s, s + 10, None) for s in (0, 10, 20)])
        theirs = shown(lambda: [runner_chunk(f, NanoAODSchema, {}, s, s + 10) for s in (0, 10, 20)])
    assert ours == theirs and len(theirs) == 6


class Changed(NanoAODSchema):
    """NanoAODSchema, whose settings a test changes."""


def test_a_schemas_settings_changed_between_chunks_change_the_next_chunks_as_the_runners():
    """A processor that changes its schema's settings (class attributes) between chunks: the next chunk's form and
    warnings follow them as ``from_root``'s do, and going back takes the form made before."""
    path = str(NANOAOD / "nano_dy.root")
    forms = {}
    try:
        with uproot.open(path) as f:
            made = nanoevents.FileChunks(f, "Events", Changed, forms)
            for start, quiet in ((0, False), (10, True), (20, False)):
                Changed.warn_missing_crossrefs = not quiet
                Changed.mixins = {**NanoAODSchema.mixins, "Muon": "Electron"} if quiet else NanoAODSchema.mixins
                ours, our_warnings = _warned(made.events, {}, start, start + 10, None)
                theirs, their_warnings = _warned(runner_chunk, f, Changed, {}, start, start + 10)
                assert our_warnings == their_warnings and ours.layout.form == theirs.layout.form
                assert type(ours.Muon) is type(theirs.Muon)
                assert (len(their_warnings), type(theirs.Muon).__name__) == (
                    (2, "ElectronArray") if quiet else (6, "MuonArray")
                )
    finally:
        del Changed.warn_missing_crossrefs, Changed.mixins
    assert len([key for key in forms if key[0] == "schema"]) == 2


class ByDataset(BaseSchema):
    """A schema whose form reads the metadata it is given: its events' record name is the dataset's."""

    def __init__(self, base_form, *args, **kwargs):
        super().__init__(base_form)
        self._form["parameters"]["of"] = self._form["parameters"]["metadata"].get("dataset")


class Counting(BaseSchema):
    """A schema that writes into the metadata what follows from what it holds."""

    def __init__(self, base_form, *args, **kwargs):
        super().__init__(base_form)
        metadata = self._form["parameters"]["metadata"]
        metadata["given"] = len(metadata)


class Needing(BaseSchema):
    """A schema that needs a metadata key."""

    def __init__(self, base_form, *args, **kwargs):
        super().__init__(base_form)
        self._form["parameters"]["of"] = self._form["parameters"]["metadata"]["dataset"].upper()


@pytest.mark.parametrize(
    "schema, why",
    [(ByDataset, "form depends"), (Counting, "changes the metadata"), (Needing, "fails without metadata (KeyError")],
)
def test_a_schema_following_the_metadata_it_is_given_runs_for_every_chunk(schema, why):
    """``schemaform.built`` says why a schema's form cannot be made once (checked against the first chunk's metadata),
    and each chunk is then the schema's own, for every chunk's metadata."""
    path = str(NANOAOD / "nano_dimuon.root")
    with uproot.open(path) as f:
        made = nanoevents.FileChunks(f, "Events", schema, {})
        for start, dataset in ((0, "a"), (10, "b"), (20, "c")):
            metadata = {"dataset": dataset, "entrystart": start}
            ours = made.events(dict(metadata), start, start + 10, None)
            theirs = runner_chunk(f, schema, dict(metadata), start, start + 10)
            assert ours.layout.form == theirs.layout.form and ours.metadata == theirs.metadata
        found = [value for key, value in made.forms.items() if key[0] == "schema"]
    assert len(found) == 1 and isinstance(found[0], str) and why in found[0], found
