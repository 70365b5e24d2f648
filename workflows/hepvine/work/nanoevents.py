"""A file's chunks as NanoEvents, made as coffea's ``NanoEventsFactory.from_root(..., mode="virtual")`` makes them
but without its costs that grow with a job's chunks and files (``FileChunks``):

- the tree's base form (the forms of its ~1,600 branches, ~50 ms to derive on the NanoAOD layout), which ``from_root``
  derives for every chunk, is derived once for a job's files of one layout (``layout_key``) and copied for each chunk;
- the schema's form of that base form (NanoAODSchema's collections, ~5 ms a 100,000-event chunk), which ``from_root``
  makes again for every chunk, is made once a layout (``hepvine.work.schemaform``: checked against the schema, its
  metadata and warnings given to each chunk as the schema gives them);
- a preloaded count branch (``nJet``) is taken from the offsets of a preloaded branch it counts (``Jet_pt``), not
  read, and a plain tree's preloaded branches are read by name, not found by a filter over all its branches;
- the garbage collector waits while a chunk's objects (no data) are made;
- with config ``columns: auto`` (the default) or ``traced`` (``FileChunks.cut_to``), a chunk's fields that the
  analysis does not read are placeholders (``hepvine.work.cutform``), made from the collections it reads instead of
  the tree's every branch, the schema's form of them made once a layout and trace (``cutform.built``).

Built from coffea's own parts in ``from_root``'s order (``coffea_parts``); where this coffea lacks them or they take
other arguments, or the schema reads podio metadata, every chunk is ``from_root``'s. ``test_processor`` checks that
the chunks are what ``from_root`` makes.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import inspect
import pickle
import warnings
from collections.abc import Hashable
from types import SimpleNamespace

# The leaves whose type uproot reads from the leaf's class, its title and fIsUnsigned alone (identify._leaf_to_dtype).
PLAIN_LEAVES = frozenset({"TLeafO", "TLeafB", "TLeafS", "TLeafI", "TLeafL", "TLeafG", "TLeafF", "TLeafD"})
# The base forms a job keeps, the schema's forms of them (``FileChunks._built``) and with columns: auto or traced
# their cuts (``FileChunks.cut_to``) and the schema's forms of those: four a layout, of the layouts it meets (a
# dataset's files share one). Also the traces it keeps (``Analysis.traced``: one a dataset, tree and layout).
KEPT_FORMS = 24


def layout_key(tree) -> str | None:
    """What TREE's base form (``UprootSourceMapping._extract_base_form``) is made of, read from its branches' own
    members, for a tree of plain branches (the NanoAOD layout: every branch a ``TBranch`` with one leaf of a number
    type, no sub-branches): its title and, per branch, its name and title, its leaf's class, title, length and
    signedness, and its count leaf's name. Those are all uproot looks at to interpret such a branch
    (``uproot.interpretation.identify.interpretation_of``), so two trees with the same key have the same form. The
    key is the SHA-256 digest (hex) of their text: a job looks forms up by it a few times a file and once a chunk,
    where a tuple of the 1,590 branches' rows is hashed anew at each lookup (~0.3 ms). None for any other tree
    (objects, RNTuple) or while uproot has custom interpretations registered: their forms are derived file by file.
    ~8 ms for the 1,590 branches of real NanoAOD, against ~50 ms to derive the form. The list follows uproot 5.7's
    ``interpretation_of``; ``test_processor`` checks that equal keys mean equal forms on the real files, a ROOT copy
    and written trees (types, signedness, titles), so an uproot that reads another member shows there."""
    from uproot.behaviors.TTree import TTree
    from uproot.interpretation import identify

    if not isinstance(tree, TTree) or getattr(identify, "_registered_interpretations", None) != set():
        return None
    rows = []
    for branch in tree.branches:
        # Each object's members gathered once (all_members: its own and its bases'), not looked up member by member
        # through its bases (``member``: 10 -> 6.5 ms for the 1,590 branches).
        of_branch = branch.all_members
        leaves = of_branch["fLeaves"]
        if branch.classname != "TBranch" or len(of_branch["fBranches"]) or len(leaves) != 1:
            return None
        leaf = leaves[0]
        if leaf.classname not in PLAIN_LEAVES:
            return None
        of_leaf = leaf.all_members
        count = of_leaf["fLeafCount"]
        rows.append(
            (
                of_branch["fName"],
                of_branch["fTitle"],
                leaf.classname,
                of_leaf["fTitle"],
                of_leaf["fLen"],
                of_leaf["fIsUnsigned"],
                None if count is None else count.member("fName"),
            )
        )
    # (of their text, which follows their values alone: a pickle also follows which of them are one object)
    return hashlib.sha256(repr((tree.title, rows)).encode()).hexdigest()


def keep_form(forms: dict, key: Hashable, form) -> None:
    """FORM (a pickled base form, or a cut's plan: ``cutform.Cut`` or why none; a trace) kept in FORMS
    (``Analysis.forms``, ``Analysis.traced``) under KEY (its layout's), the oldest dropped beyond ``KEPT_FORMS``."""
    forms.pop(key, None)
    while len(forms) >= KEPT_FORMS:
        del forms[next(iter(forms))]
    forms[key] = form


def follow(forms: dict, order: list, new: dict) -> None:
    """FORMS (a job's ``Analysis.forms`` or ``.traced``) made what a file's own process left of its copy of them: its
    keys in ORDER (that copy's, the least recently used first), NEW's values (what the copy made that FORMS lacks)
    added, what the copy dropped dropped. The job's files after it then drop the least recently used of all its files,
    not the first met."""
    merged = {key: new[key] if key in new else forms[key] for key in order if key in new or key in forms}
    forms.clear()
    forms.update(merged)


def kept_form(forms: dict, key: Hashable, make):
    """What FORMS keeps under KEY (then the most recently used: dropped last), else MAKE() kept there
    (``keep_form``)."""
    form = forms[key] if key in forms else make()
    keep_form(forms, key, form)
    return form


@functools.cache
def coffea_parts() -> SimpleNamespace | None:
    """coffea's parts that ``FileChunks`` builds a chunk from (the ones ``NanoEventsFactory.from_root`` calls), if
    this coffea has them all and each takes the arguments ``FileChunks`` gives it (checked once a process against
    their signatures); else None, and every chunk is ``from_root``'s: a later coffea that renames or reshapes them
    costs the shared form, never a file. Said once a process (a warning in the job's log), as it costs time."""
    try:
        from coffea.nanoevents.factory import (
            NanoEventsFactory,
            TrivialUprootOpener,
            UprootSourceMapping,
            _OnlySliceableAs,
            _reads_podio_metadata,
        )
    except ImportError as e:
        return _unfit(f"{e}")
    calls = (
        ("TrivialUprootOpener", TrivialUprootOpener, ({}, {}), {}),
        (
            "UprootSourceMapping",
            UprootSourceMapping,
            (None, 0, 0),
            {"cache": {}, "file_handle": None, "use_ak_forth": True, "virtual": True, "preloaded_arrays": None},
        ),
        ("UprootSourceMapping._extract_base_form", UprootSourceMapping._extract_base_form, (None,), {}),
        (
            "UprootSourceMapping.preload_column_source",
            UprootSourceMapping.preload_column_source,
            (None, "", "", None),
            {},
        ),
        ("NanoEventsFactory._from_mapping", NanoEventsFactory._from_mapping, (None,) * 5, {"mode": "virtual"}),
        ("_OnlySliceableAs", _OnlySliceableAs, (None, slice(0)), {}),
        ("_reads_podio_metadata", _reads_podio_metadata, (None,), {}),
    )
    for name, part, args, kwargs in calls:
        try:
            inspect.signature(part).bind(*args, **kwargs)
        except (TypeError, ValueError) as e:  # another signature (TypeError) or none to read (ValueError)
            return _unfit(f"its {name} takes other arguments ({e})")
    return SimpleNamespace(
        opener=TrivialUprootOpener,
        mapping=UprootSourceMapping,
        from_mapping=NanoEventsFactory._from_mapping,
        only_sliceable=_OnlySliceableAs,
        reads_podio_metadata=_reads_podio_metadata,
    )


def _unfit(why: str) -> None:
    """Say that every chunk will be ``from_root``'s, and why (coffea_parts)."""
    import coffea

    warnings.warn(
        f"hepvine: coffea {coffea.__version__}'s NanoEvents parts do not fit hepvine.work.nanoevents ({why}): every "
        "chunk is made by NanoEventsFactory.from_root, which derives each chunk's base form again (slower, the same "
        "events); install the coffea of hepvine's requirements.lock to avoid it",
        stacklevel=3,
    )


class FileChunks:
    """The chunks of one file's tree as NanoEvents: what ``NanoEventsFactory.from_root(file=OPENED, treepath=...,
    mode="virtual", entry_start=..., entry_stop=..., preload=...)`` makes, but with the tree's base form derived once
    for the file and copied for each chunk, where ``from_root`` derives it again for every chunk (the processor bench:
    ~30 ms a chunk of the 1,590-branch NanoAOD layout, ~2 ms to copy). Built from coffea's own parts in
    ``from_root``'s order (``UprootSourceMapping``, ``TrivialUprootOpener``, ``NanoEventsFactory._from_mapping``);
    ``test_processor`` checks that it gives what ``from_root`` gives. Where coffea lacks those parts or takes other
    arguments (``coffea_parts``: another version), or the schema reads podio metadata, every chunk is
    ``from_root``'s.

    FORMS (``Analysis.forms``), when given, keeps base forms by layout (``layout_key``) for the files after this
    one: a file whose tree has the layout of one met before derives none (~50 ms a file of the NanoAOD layout)."""

    def __init__(self, opened, treename: str, schema: type, forms: dict | None = None):
        self.opened, self.treename, self.schema, self.forms = opened, treename, schema, forms
        self.tree = opened[treename]
        self._base_form: bytes | None = None  # pickled: a chunk's schema may change the form it is given
        self._plain = False  # the tree has a layout key: plain branches only (_derived_form)
        self._layout: str | None = None  # that key
        self._cut = None  # cutform.Cut: how this file's chunks are cut (cut_to), if they are
        self._traced: frozenset | None = None  # the trace it was planned for
        self._schema_built = None  # (settings, schemaform.built's) for a tree of no layout key (_built)
        self._reads_of: dict[frozenset, tuple] = {}  # _reads', by preload
        self._asked: set[str] = set()  # the branches the mapping of a chunk read lazily asked for (_CountsOnUse)
        parts = coffea_parts()
        self._parts = None if parts is None or parts.reads_podio_metadata(schema) else parts

    def events(self, metadata: dict, start: int, stop: int, preload: frozenset | None, reads: frozenset | None = None):
        """The NanoEvents of entries START to STOP with METADATA, the branches PRELOAD (if any) read in bulk. Else the
        branches are read as the analysis touches them, but a count branch among those it is known to read taken from
        a branch of them it counts (``_CountsOnUse``): READS, its trace, if given; else the branches this file's
        chunks before asked for (none for its first chunk).

        The garbage collector is paused while they are made (after the bulk read of PRELOAD: ~58,000 objects on the
        NanoAOD layout, no data) and while the tree's base form is derived, and its youngest generation collected after:
        the collections the making set off walked the file's tree (~74,000 objects) again and again. Side by side on a
        local file of 500,000 events (5 chunks, nothing preloaded), best of 5: LZMA 2.13 -> 2.05 s, ZSTD 0.75 -> 0.65 s,
        peak memory 495 -> 433 MB; no change on 200,000 (2 chunks). (``from_root``'s chunks, which read PRELOAD as they
        are made, are made as coffea makes them.)"""
        tree = self.tree
        start, stop = max(start, 0), min(stop, tree.num_entries)
        if self._parts is None:
            from coffea.nanoevents import NanoEventsFactory

            return NanoEventsFactory.from_root(
                file=self.opened,
                treepath=self.treename,
                schemaclass=self.schema,
                metadata=metadata,
                mode="virtual",
                entry_start=start,
                entry_stop=stop,
                preload=preload,
            ).events()
        self._derive()
        preloaded = None
        if preload is not None:
            names, counted = self._reads(preload)
            if names is None:
                arrays = tree.arrays(
                    filter_branch=lambda branch: branch.name in preload and branch.name not in counted,
                    entry_start=start,
                    entry_stop=stop,
                    ak_add_doc=True,
                    how=dict,
                )
            elif names:
                arrays = tree.arrays(names, entry_start=start, entry_stop=stop, ak_add_doc=True, how=dict)
            else:  # none of PRELOAD in the tree (a trace of another layout's file)
                arrays = {}
            for count, (jagged, branch) in counted.items():
                arrays[count] = _counts(arrays[jagged], branch)
            preloaded = {name: self._parts.only_sliceable(a, slice(start, stop)) for name, a in arrays.items()}
        else:
            known = reads if reads is not None else frozenset(self._asked)
            counted = self._reads(known)[1] if known else {}
            preloaded = _CountsOnUse(tree, counted, start, stop, self._parts.only_sliceable, self._asked)
        with _collector_paused():
            return self._make(metadata, start, stop, preloaded)

    def cut_to(self, traced: frozenset) -> str | None:
        """Make this file's later chunks with placeholders for the fields TRACED (the analysis's trace) does not read
        (``cutform.plan``: config ``columns: auto`` or ``traced``), their forms made from the collections it reads
        instead of the tree's every branch (a 100,000-event chunk of the NanoAOD layout for the AGC selection: 23 -> 3
        ms). Planned once a layout and trace (kept in FORMS). Only for a plain tree (``layout_key``) made from
        coffea's parts; None when the chunks are cut, else why not."""
        if self._parts is None:
            return f"this coffea's NanoEvents parts do not fit, or {self.schema.__name__} reads podio metadata"
        if self.forms is None:
            return "no forms kept (FileChunks made without FORMS)"
        self._derive()
        if not self._plain:
            return f"{self.treename} is not a tree of plain branches (NanoAOD's)"
        from hepvine.work import cutform

        def planned_now():
            with _collector_paused():
                return cutform.plan(pickle.loads(self._base_form), self.schema, traced)

        planned = kept_form(self.forms, ("cut", self._layout, self.schema, traced), planned_now)
        if isinstance(planned, str):
            return planned
        self._cut, self._traced = planned, traced
        return None

    @property
    def cut(self):
        """How this file's chunks are cut (``cutform.Cut``), or None: every field made."""
        return self._cut

    def layout(self) -> str | None:
        """The tree's layout key (``layout_key``): None when it is not a tree of plain branches, or its chunks are
        ``from_root``'s or made without FORMS."""
        if self._parts is None or self.forms is None:
            return None
        self._derive()
        return self._layout

    def _derive(self) -> None:
        """The tree's base form derived (or taken from FORMS), if it is not yet."""
        if self._base_form is None:
            with _collector_paused():
                self._base_form = self._derived_form(self._parts.mapping)

    def _reads(self, preload: frozenset) -> tuple[list[str] | None, dict[str, tuple]]:
        """How the chunks read PRELOAD: (the branches read by name, or None: read as ``from_root`` reads them, by a
        filter over every branch of the tree; the count branches taken from the branches they count, ``_counted``). By
        name when the tree's branches are plain (``layout_key``: none has branches of its own, each is read as numbers):
        then the branches named are what the filter selects (its names absent from the tree are not read either),
        without walking the tree's ~1,600 branches for each chunk (the NanoAOD layout, the AGC selection's 15 branches
        of 100,000 events from a local ZSTD copy: ~3-5 ms less a chunk, of ~40 ms to read them)."""
        if preload not in self._reads_of:
            counted = self._counted(preload)
            names = None
            if self._plain:
                names = [name for name in sorted(preload - counted.keys()) if self.tree.get(name) is not None]
            self._reads_of[preload] = (names, counted)
        return self._reads_of[preload]

    def _counted(self, preload: frozenset) -> dict[str, tuple]:
        """Of PRELOAD's branches, each count branch (``nJet``) that counts another of them (``Jet_pt``): {count: (the
        branch it counts of fewest compressed bytes, the count branch)} — the least to read where a lazily read chunk
        asks for the count and never for that branch (``_CountsOnUse``). ROOT writes each entry of a branch with a
        count leaf with as many values as the count says, so the counts are that branch's numbers of values per entry,
        taken from the offsets already read (``_counts``) instead of read again: a count branch's baskets are read and
        decompressed like any other (the processor bench: the AGC selection's 3 counts are ~4% of a 200,000-event LZMA
        file's reading). Only plain ``TBranch``es of a TTree (the NanoAOD layout): an integer count, a jagged branch of
        numbers; an RNTuple's fields are read as they are. (This takes the file to be written as ROOT writes an entry:
        a file whose counts and values disagree would be read with counts that follow its values.)"""
        from uproot.behaviors.TTree import TTree
        from uproot.interpretation.jagged import AsJagged
        from uproot.interpretation.numerical import AsDtype

        found: dict[str, tuple] = {}
        for name in sorted(preload) if isinstance(self.tree, TTree) else ():
            branch = self.tree.get(name)
            if branch is None or branch.classname != "TBranch" or not isinstance(branch.interpretation, AsJagged):
                continue
            count = branch.count_branch
            if count is None or count.name not in preload or count.classname != "TBranch":
                continue
            read_as = count.interpretation
            if not (isinstance(read_as, AsDtype) and read_as.to_dtype.shape == () and read_as.to_dtype.kind in "iu"):
                continue
            if count.name not in found or branch.compressed_bytes < self.tree[found[count.name][0]].compressed_bytes:
                found[count.name] = (name, count)
        return found

    def _make(self, metadata: dict, start: int, stop: int, preloaded: dict | None):
        """The chunk's NanoEvents from coffea's parts (PRELOADED: the arrays read in bulk, if any)."""
        tree = self.tree
        opener, mapping_class = self._parts.opener, self._parts.mapping
        key = (str(tree.file.uuid), tree.object_path, f"{start}-{stop}")
        mapping = mapping_class(
            opener({key[0]: tree.file.file_path}, {}),
            start,
            stop,
            cache={},
            file_handle=self.opened,
            use_ak_forth=True,
            virtual=True,
            preloaded_arrays=preloaded,
        )
        mapping.preload_column_source(key[0], key[1], tree)
        if self._cut is None:
            # (an empty chunk, the trace's or an empty file's, runs the schema: with columns: auto or traced its later
            # chunks are cut, and need none made for every field)
            built = self._built(metadata) if stop > start else None
            if built is None:
                form, schema = pickle.loads(self._base_form), self.schema
            else:  # (coffea puts the chunk's metadata in the base form it is given: only that is read)
                from hepvine.work import schemaform

                form = {"parameters": {}}
                schema = functools.partial(schemaform.BuiltSchema, schema=self.schema, built=built)
        else:
            from hepvine.work import cutform

            built = self._built(metadata, cut=True) if stop > start else None
            form = pickle.loads(self._cut.base) if built is None else {"parameters": {}}
            schema = functools.partial(cutform.CutSchema, schema=self.schema, cut=self._cut, built=built)
        return self._parts.from_mapping(mapping, key, form, schema, metadata, mode="virtual").events()

    def _built(self, metadata: dict, cut: bool = False):
        """The schema's form of this tree's layout (with CUT, of its cut: ``cutform.built``) made once for its settings
        (``schemaform.built``, checked against the schema with METADATA, the first chunk's) and kept in FORMS for a
        tree of plain branches, else for this file; None where each chunk runs the schema (``built`` says why not, or
        the settings cannot be pickled)."""
        from hepvine.work import cutform, schemaform

        settings = schemaform.settings(self.schema)
        if settings is None:
            return None

        def built_now():
            if cut:
                return cutform.built(self._cut, self.schema, metadata)
            return schemaform.built(self._base_form, self.schema, metadata)

        if cut:  # (a cut is of a tree of plain branches, for one trace)
            key = ("cut schema", self._layout, self.schema, self._traced, settings)
            found = kept_form(self.forms, key, built_now)
        elif self._layout is not None:
            found = kept_form(self.forms, ("schema", self._layout, self.schema, settings), built_now)
        else:
            if self._schema_built is None or self._schema_built[0] != settings:
                self._schema_built = (settings, built_now())
            found = self._schema_built[1]
        return found if isinstance(found, schemaform.Built) else None

    def _derived_form(self, mapping_class) -> bytes:
        """The tree's base form with its typenames (as ``from_root`` makes it), pickled: from FORMS when a tree of its
        layout was met before, else derived (and kept in FORMS, the oldest dropped beyond ``KEPT_FORMS``)."""
        key = layout_key(self.tree) if self.forms is not None else None
        self._plain, self._layout = key is not None, key

        def derived():
            form = mapping_class._extract_base_form(self.tree)
            form["typenames"] = self.tree.typenames()
            return pickle.dumps(form, protocol=pickle.HIGHEST_PROTOCOL)

        return derived() if key is None else kept_form(self.forms, key, derived)


class _CountsOnUse:
    """What a lazily read chunk gives coffea's mapping as its preloaded arrays (``UprootSourceMapping``'s
    ``preloaded_arrays``: asked whether it holds a branch, then for it): for the count branches (``nJet``) the
    analysis is known to read with a branch each counts (``Jet_pt``; COUNTED: ``FileChunks._counted``), the count
    taken from that branch's values (``_counts``) and the branch given as read, both when NanoEvents first asks for
    either, so that the branch is read once for both and the count's baskets never. Every other branch it does not
    hold: the mapping reads it as it reads any. A branch is read here as ``FileChunks.events`` reads preloaded ones,
    by uproot, with its title as ``__doc__``. Each branch the mapping asks for is added to ASKED (the file's: what its
    next chunk's analysis is known to read, when it was not traced).

    The processor bench, the AGC on a local 500,000-event ZSTD copy, alternated 8 rounds, best of 4: with ``columns:
    traced`` (its trace) 517 -> 503 ms; with every field (the chunks before) 639 -> 614 ms; the 200,000-event LZMA
    file 984 -> 967 ms (native ~430 and ~870 ms)."""

    def __init__(self, tree, counted: dict[str, tuple], start: int, stop: int, sliceable, asked: set):
        self._tree, self._counted, self._sliceable, self._asked = tree, counted, sliceable, asked
        self._start, self._stop = start, stop
        self._counts_of = {jagged for jagged, _ in counted.values()}
        self._arrays: dict = {}

    def __contains__(self, name) -> bool:
        self._asked.add(name)
        return name in self._counted or name in self._counts_of

    def __getitem__(self, name):
        return self._sliceable(self._array(name), slice(self._start, self._stop))

    def __iter__(self):
        """The branches it holds (not the old protocol of ``__getitem__`` with 0, 1, ...)."""
        return iter(sorted(self._counted.keys() | self._counts_of))

    def _array(self, name: str):
        if name not in self._arrays:
            if name in self._counted:
                jagged, branch = self._counted[name]
                self._arrays[name] = _counts(self._array(jagged), branch)
            else:
                self._arrays[name] = self._tree[name].array(
                    entry_start=self._start, entry_stop=self._stop, ak_add_doc=True
                )
        return self._arrays[name]


@contextlib.contextmanager
def _collector_paused():
    """The garbage collector paused for the block, if it is on, and its youngest generation collected after
    (``FileChunks.events``); off, it stays off."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
            gc.collect(0)


def _counts(jagged, count):
    """The values of the count branch COUNT (``nJet``) for the entries of JAGGED, a branch it counts (``Jet_pt``) read
    as uproot reads it (an awkward array with its ``__doc__``): each entry's number of values, in COUNT's type, with
    COUNT's title as ``__doc__`` (uproot's ``ak_add_doc``). Taken from the offsets of the list uproot reads a jagged
    branch as, and the array built as its layout: ``ak.num`` and ``ak.with_parameter`` gave the same array in ~0.43 ms
    instead of ~0.08 (100,000 entries; 15 a file of the AGC selection on 500,000 events)."""
    import awkward as ak
    import numpy as np

    layout = jagged.layout
    if isinstance(layout, ak.contents.ListOffsetArray):
        numbers = np.diff(np.asarray(layout.offsets.data))
    else:  # (a list of another layout: as awkward counts it)
        numbers = np.asarray(ak.num(jagged, axis=1))
    doc = {"__doc__": count.title}
    return ak.Array(ak.contents.NumpyArray(numbers.astype(count.interpretation.to_dtype), parameters=doc))
