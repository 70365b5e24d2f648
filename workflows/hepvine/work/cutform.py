"""A chunk's NanoEvents cut to the fields an analysis reads (config ``columns: traced``), checked against the full ones.

On the NanoAOD layout a chunk's NanoEvents cost ~23 ms to make whatever the analysis reads (the form of ~1,590
branches: coffea's schema, ``ak.from_buffers``' virtual arrays, freeing them), a tenth to a third of what a native
selection takes per file. ``plan`` cuts that cost without changing what the analysis sees of what it reads:

- ``events.fields`` stays the Runner's, in its order: every top-level field is there;
- a field the analysis's trace reads (``kept``) is made exactly as the Runner makes it: its form is checked, once a
  layout and trace, to equal the form the schema gives it from every branch (``plan`` gives no cut otherwise);
- a field it does not read is a placeholder (``UnreadArray``): its length and its ``.fields`` are the field's, and any
  use of its contents (an attribute, an item, iteration, conversion) raises ``NotRead`` naming the field and the fix
  (``columns: all``): a processor that reads a field its trace missed (for some files or events only) fails loudly.

What can still differ silently from the Runner's: awkward functions applied to a placeholder itself (``ak.fields``,
``ak.type``, ``ak.without_parameters`` of ``events.Tau`` see a record of no fields and answer without raising), a
placeholder the processor returns in its output (it pickles as empty records), a ``NotRead`` the processor catches
itself, and the events' layout and form as a whole (a layout's ``.fields`` of a placeholder is empty;
``events.Tau.fields`` is not).
"""

from __future__ import annotations

import copy
import functools
import pickle
import re
import warnings
from dataclasses import dataclass

import awkward as ak
from coffea.nanoevents.schemas.base import BaseSchema
from coffea.nanoevents.util import unquote

UNREAD = "hepvine.Unread"  # the placeholder's record name (its behaviour: UnreadArray)
FIELD = "hepvine_field"  # the placeholder's parameter naming the field it stands for
FIELDS = "hepvine_fields"  # and the one naming that field's own fields
# Fields kept whatever the analysis's trace reads: the event IDs, which NanoAODSchema requires of every tree
# (error_missing_event_ids) and an analysis may read for some events only (a data file's run, read from its first
# event: a trace on an empty chunk never does).
EVENT_IDS = ("run", "luminosityBlock", "event")
# Branches kept in the cut base form whatever the analysis reads: the event IDs, and the generated particles' count
# (it brings their collection), by whose presence NanoAODSchema tells simulation from data (and so whether a
# collection gets its cross-references to generator collections).
ALWAYS = (*EVENT_IDS, "nGenPart")


class NotRead(RuntimeError):
    """The analysis used a field its chunk was made without (config ``columns: traced``)."""


class _Unread:
    """What a placeholder (``UnreadArray``, ``UnreadRecord``: one event's) does: its ``.fields`` are the field's, any
    use of its contents raises ``NotRead``."""

    def _parameter(self, name: str):
        raise NotImplementedError

    def _not_read(self, use: str):
        field = self._parameter(FIELD)
        raise NotRead(
            f"events.{field}{use}: hepvine made these events without {field} (config columns: traced), as the "
            f"analysis's trace did not see it read; run with columns: all to read every field"
        )

    def __getattr__(self, name):
        if name.startswith("_"):  # awkward's own and Python's protocols
            return super().__getattr__(name)
        self._not_read(f".{name}")

    @property
    def fields(self) -> list[str]:
        return list(self._parameter(FIELDS))

    def __getitem__(self, where):
        self._not_read(f"[{where!r}]")

    def __iter__(self):
        self._not_read(" iterated")

    def __array__(self, *args, **kwargs):
        self._not_read(" as a NumPy array")

    def to_list(self):
        self._not_read(".to_list()")

    tolist = to_list

    def __repr__(self) -> str:
        fields = list(self._parameter(FIELDS))
        shown = ", ".join(fields[:5]) + (", ..." if len(fields) > 5 else "")
        return f"<{type(self).__name__} events.{self._parameter(FIELD)}: not made (config columns: traced)" + (
            f"; fields {shown}>" if fields else ">"
        )

    __str__ = __repr__

    def show(self, *args, **kwargs) -> None:
        print(repr(self))

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {"text/plain": repr(self)}


class UnreadArray(_Unread, ak.Array):
    """``events.<field>`` for a field the analysis's trace did not read (its length is the field's)."""

    def _parameter(self, name: str):
        return self.layout.purelist_parameter(name)


class UnreadRecord(_Unread, ak.Record):
    """``events[i].<field>`` for a field the analysis's trace did not read."""

    def _parameter(self, name: str):
        return self.layout.array.parameter(name)


@functools.cache
def _behavior(schema: type) -> dict:
    """SCHEMA's behaviour with the placeholder's (made once a schema: awkward keys its lookups on the dict)."""
    return {**schema.behavior(), ("*", UNREAD): UnreadArray, UNREAD: UnreadRecord}


@dataclass(frozen=True)
class Cut:
    """How a layout's chunks are made for one trace: from BASE (the cut base form, pickled), into FIELDS (the schema's
    top-level fields from every branch, in order), of which those in UNREAD are placeholders (their forms, by name);
    QUIET: the schema's warnings of the cut base form that it does not give from every branch (``quieten``)."""

    base: bytes
    fields: tuple
    unread: dict
    quiet: frozenset


class CutSchema(BaseSchema):
    """The events of a cut (``Cut``): SCHEMA's form of the cut base form, with a placeholder for each unread field.
    Passed to coffea as ``functools.partial(CutSchema, schema=..., cut=...)``: coffea calls it with the base form."""

    def __init__(self, base_form: dict, *, schema: type, cut: Cut):
        made = schema(base_form).form
        contents = dict(zip(made["fields"], made["contents"]))
        self._schema = schema
        self._form = {
            **made,
            "fields": list(cut.fields),
            "contents": [cut.unread[name] if name in cut.unread else contents[name] for name in cut.fields],
        }

    def behavior(self) -> dict:
        return _behavior(self._schema)


def _placeholder(name: str, form: dict) -> dict:
    """The form of the placeholder of the field NAME whose form is FORM: a record of no fields (no buffer to make or
    read) naming it and its fields."""
    return {
        "class": "RecordArray",
        "fields": [],
        "contents": [],
        "parameters": {"__record__": UNREAD, FIELD: name, FIELDS: list(ak.forms.from_dict(form).fields)},
        "form_key": None,
    }


def _columns(form, first: bool) -> set[str]:
    """The branches FORM's buffers load (coffea's form keys: ``Jet_pt,!load,...``, as ``coffea.nanoevents.trace``
    reads them): with FIRST, only each buffer's first (the branch it is made of: a cross-reference's key loads its
    target's counts too)."""
    found: set[str] = set()
    stack = [form]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            key = node.get("form_key")
            if isinstance(key, str):
                elements = unquote(key).split(",")
                loaded = [elements[i - 1] for i, op in enumerate(elements) if i and op.startswith("!load")]
                found.update(loaded[:1] if first else loaded)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _collections(branches: list[str], names: set[str]) -> set[str]:
    """Of BRANCHES, NAMES and every branch of the collections they belong to (``Jet_pt`` and ``nJet`` bring every
    ``Jet_*`` and ``nJet``): the schema decides what a collection holds from its branches, and a cross-reference from
    whether its target is there. A collection is a name up to its first ``_``."""
    heads = {n.partition("_")[0] for n in names if "_" in n} | {n[1:] for n in names if n.startswith("n")}
    return {n for n in branches if n in names or n.partition("_")[0] in heads or (n.startswith("n") and n[1:] in heads)}


def plan(base_form: dict, schema: type, traced: frozenset) -> Cut | str:
    """The cut of the layout whose base form is BASE_FORM (cut in place) for an analysis whose trace read TRACED
    (branch names), made with SCHEMA; or, where there is none, why (a string). A top-level field is kept when a buffer
    of its own is made of a traced branch, and the event IDs always; the cut base form holds the collections
    (``_collections``) of every branch a kept field loads and ``ALWAYS``'s. Checked: the schema's form of the cut base
    gives each kept field the form, and the events the parameters, that it gives them from every branch.

    The schema's warnings from every branch (coffea's, of a cross-reference whose index the file lacks) are given as
    the Runner gives them; those it gives only of the cut base form (an index left out with its collection) are the
    cut's ``quiet``."""
    with warnings.catch_warnings(record=True) as runners:
        warnings.simplefilter("always")
        full = schema(copy.deepcopy(base_form)).form
    for seen in runners:
        warnings.warn_explicit(seen.message, seen.category, seen.filename, seen.lineno)
    kept = [n for n, c in zip(full["fields"], full["contents"]) if _columns(c, first=True) & traced or n in EVENT_IDS]
    if set(kept) <= set(EVENT_IDS):
        return "the trace found no field read"
    loaded = set().union(*(_columns(c, first=False) for n, c in zip(full["fields"], full["contents"]) if n in kept))
    need = _collections(base_form["fields"], loaded | set(ALWAYS))
    cut = base_form  # (the caller's own copy)
    pairs = [(n, c) for n, c in zip(cut["fields"], cut["contents"]) if n in need]
    cut["fields"], cut["contents"] = [n for n, _ in pairs], [c for _, c in pairs]
    base = pickle.dumps(cut, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        with warnings.catch_warnings(record=True) as cuts:
            warnings.simplefilter("always")
            made = schema(cut).form
    except Exception as e:  # a schema of the user's that needs what the cut left out: the file gets every field
        return f"{schema.__name__} fails on the cut base form: {type(e).__name__}: {e}"
    contents = dict(zip(made["fields"], made["contents"]))
    differ = [n for n, c in zip(full["fields"], full["contents"]) if n in kept and contents.get(n) != c]
    if differ:
        return f"{', '.join(differ)} would differ from the Runner's"
    if made["parameters"] != full["parameters"]:
        return "the events' parameters would differ from the Runner's"
    unread = {n: _placeholder(n, c) for n, c in zip(full["fields"], full["contents"]) if n not in kept}
    quiet = frozenset(str(w.message) for w in cuts) - {str(w.message) for w in runners}
    return Cut(base, tuple(full["fields"]), unread, quiet)


_quieted: set[str] = set()  # the warnings quieten has had this process ignore


def quieten(cut: Cut) -> None:
    """Have this process ignore the warnings the schema gives only of CUT's base form (``Cut.quiet``: of indices left
    out with their collections, not the file's), which every chunk would give again: the job's log shows the Runner's
    warnings only. Once a process and warning (a file's own process, forked, plans no cut: it is given the job's)."""
    for text in cut.quiet - _quieted:
        warnings.filterwarnings("ignore", f"{re.escape(text)}$")
        _quieted.add(text)
