"""A chunk's NanoEvents cut to the fields an analysis reads (config ``columns: auto``, the default, or ``traced``),
checked against the full ones.

On the NanoAOD layout a chunk's NanoEvents cost ~23 ms to make whatever the analysis reads (the form of ~1,590
branches: coffea's schema, ``ak.from_buffers``' virtual arrays, freeing them), a tenth to a third of what a native
selection takes per file. ``plan`` cuts that cost without changing what the analysis sees of what it reads:

- ``events.fields`` stays the Runner's, in its order: every top-level field is there;
- a field the analysis's trace reads (``kept``) is made exactly as the Runner makes it: its form is checked, once a
  layout and trace, to equal the form the schema gives it from every branch (``plan`` gives no cut otherwise);
- a field it does not read is a placeholder (``UnreadArray``): its length and its ``.fields`` are the field's, and any
  use of its contents (an attribute, an item, iteration, conversion) raises ``NotRead`` naming the field and the fix
  (``columns: all``): a processor that reads a field its trace missed (for some files or events only) fails loudly.

Nothing of a placeholder answers silently: its other attributes and properties (``.type``, ``.ndim``, ``.mask``...),
awkward's functions (``ak.fields``, ``ak.type``, ``ak.zip``... of it), NumPy's ufuncs and functions, and pickling raise
``NotRead`` too. The chunk's processing is checked after it (``processor``): a ``NotRead`` the analysis caught itself
(``used``), or a placeholder in what it returned (``check_output``: it would pickle as empty records), fails the file
all the same (an array or layout holding one, too). Awkward's functions given the events (or a slice of them, or one
event) holding a placeholder raise ``NotRead`` where they would give it out of awkward or strip its mark
(``ak.to_parquet``, ``ak.to_arrow``, ``ak.to_json``... — its ``to_*`` but those that give an awkward array —,
pyarrow's ``pa.array``, ``ak.without_parameters``, ``ak.flatten`` and ``ak.ravel``): it would be written or seen as a
record of no fields, or count as no values (``CutEvents``); the others (``ak.with_field``, ``ak.num``,
``ak.concatenate``...) work as with every field and keep the placeholders what they are; ``ak.to_list`` of anything
holding one raises (the placeholder, converted). What a cut still changes, silently: the events' layout as a whole
(``events.layout``: a layout's ``.fields`` of a placeholder is empty, ``events.Tau.fields`` is not), and so what
awkward's functions but ``ak.to_list`` see of a placeholder where no override reaches: in a selection of the events'
fields (``events[["Muon", "Tau"]]``: a plain array, as the Runner's), in the events given to a function that
dispatches on no argument (``ak.to_safetensors``) or in a generator (``ak.to_parquet_row_groups``) — a record of no
fields; a printed chunk shows a placeholder as ``{}``.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import importlib
import inspect
import pickle
import sys
import traceback

import awkward as ak
from coffea.nanoevents.schemas.base import BaseSchema
from coffea.nanoevents.util import unquote

from hepvine.work import schemaform

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
    """The analysis used a field its chunk was made without (config ``columns: auto``, the default, or ``traced``)."""


# The first NotRead raised since ``used`` last asked (the analysis may catch it): its message and the stack it was
# raised from (not the exception: its traceback would keep the chunk alive).
_first_use: list[tuple[str, traceback.StackSummary]] = []


def used() -> tuple[str, traceback.StackSummary] | None:
    """(the message, the stack) of the first ``NotRead`` raised since the last call, whether or not the analysis
    caught it; then forgotten."""
    return _first_use.pop() if _first_use else None


# A placeholder's public attributes that answer (what awkward and Python need to make and hold one): any other raises.
_ANSWERED = frozenset({"layout", "behavior", "attrs", "fields", "show"})
# Of its underscored names it lacks, those Python and IPython look for (AttributeError as usual); any other raises.
_PROBED = ("__", "_repr_", "_ipython_")


def _not_made(field: str, use: str = "", how: str = "") -> str:
    """What ``NotRead`` says of a USE of the placeholder of FIELD (HOW it came to be used, if said)."""
    return (
        f"events.{field}{use}: {how}hepvine made these events without {field} (config columns: auto or traced), as the "
        "analysis's trace did not see it read; run with columns: all to read every field"
    )


def _raise(message: str):
    """Raise ``NotRead`` with MESSAGE, remembered (``used``) if it is the first since ``used`` last asked."""
    error = NotRead(message)
    if not _first_use:
        _first_use.append((message, traceback.extract_stack()[:-2]))
    raise error


def _printing() -> bool:
    """Whether awkward's printer asks (a few frames up: through ``_Unread.__getattribute__``)."""
    frame = sys._getframe(2)
    for _ in range(3):
        if frame is None or frame.f_globals.get("__name__") == "awkward.prettyprint":
            return frame is not None
        frame = frame.f_back
    return False


class _Unread:
    """What a placeholder (``UnreadArray``, ``UnreadRecord``: one event's) does: its length and ``.fields`` are the
    field's; any other use of it raises ``NotRead`` (attributes, items, iteration, conversion, awkward's and NumPy's
    functions, pickling)."""

    def _parameter(self, name: str):
        raise NotImplementedError

    def _not_read(self, use: str):
        _raise(_not_made(self._parameter(FIELD), use))

    def __getattribute__(self, name):
        if name.startswith("_") or name in _ANSWERED:  # awkward's own and Python's protocols
            return super().__getattribute__(name)
        self._not_read(f".{name}")

    def __getattr__(self, name):  # an underscored name it lacks: a behaviour's method (coffea's _apply_global_index)
        if name.startswith(_PROBED):
            return super().__getattr__(name)
        self._not_read(f".{name}")

    @property
    def fields(self) -> list[str]:
        """The field's fields (as the Runner's events have them); none to awkward's printer, which would look each up
        in the placeholder's layout (a record of no fields): a printed chunk shows a placeholder as ``{}``."""
        return [] if _printing() else list(self._parameter(FIELDS))

    def __getitem__(self, where):
        self._not_read(f"[{where!r}]")

    def __iter__(self):
        self._not_read(" iterated")

    def __array__(self, *args, **kwargs):
        self._not_read(" as a NumPy array")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        self._not_read(f" given to numpy.{ufunc.__name__}")

    def __array_function__(self, func, types, args, kwargs):
        self._not_read(f" given to numpy.{func.__name__}")

    def __awkward_function__(self, func, array_likes, args, kwargs):
        self._not_read(f" given to ak.{func.__name__}")

    def __reduce_ex__(self, protocol):
        self._not_read(" pickled")

    def __repr__(self) -> str:
        fields = list(self._parameter(FIELDS))
        shown = ", ".join(fields[:5]) + (", ..." if len(fields) > 5 else "")
        return f"<{type(self).__name__} events.{self._parameter(FIELD)}: not made (config columns: auto or traced)" + (
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


# The record name coffea's schemas give the events.
EVENTS = "NanoEvents"
# Awkward's functions named to_* that give an awkward array (its placeholders kept, with their behaviour): the events
# may be given to them (``CutEvents``). Any other to_* gives its contents out of awkward, or is a function awkward adds
# later: given the events holding a placeholder, it raises; so do these others, in which a placeholder would lose
# its mark or count as no values.
_KEEP_PLACEHOLDERS = frozenset({"to_layout", "to_packed", "to_regular", "to_backend"})
_LOSE_PLACEHOLDERS = frozenset({"without_parameters", "flatten", "ravel"})


class CutEvents:
    """What the events of a cut chunk (their slices, one event: the schema's events classes, ``_behavior``) add to the
    schema's: given to one of awkward's functions that would give a placeholder out of awkward (its ``to_*`` but
    ``_KEEP_PLACEHOLDERS``: a file, Python objects, another library's arrays), or to pyarrow, or to one in which it
    would lose its mark or count as no values (``_LOSE_PLACEHOLDERS``), the events holding a placeholder raise
    ``NotRead``: it would be written or seen as a record of no fields. Any other function runs as awkward runs it
    (``_as_awkward_runs``). Not reached: awkward's functions that dispatch on no argument (``ak.to_safetensors``, a
    generator's arrays given to ``ak.to_parquet_row_groups``) and selections of the events' fields (plain arrays)."""

    def __awkward_function__(self, func, array_likes, args, kwargs):
        for other in array_likes:  # another argument's override (a placeholder's: it raises) goes first
            override = None if isinstance(other, CutEvents) else getattr(other, "__awkward_function__", None)
            if override is not None:
                return override(func, array_likes, args, kwargs)
        name = func.__name__
        if name in _LOSE_PLACEHOLDERS or (name.startswith("to_") and name not in _KEEP_PLACEHOLDERS):
            for given in array_likes:
                if isinstance(given, CutEvents):
                    given._check_whole(f"ak.{name}")
        return _as_awkward_runs(func, args, kwargs)

    def _check_whole(self, given_to: str) -> None:
        """Raise ``NotRead`` if these events hold a placeholder (as they are GIVEN_TO a function)."""
        field = _unread_in(self)
        if field is not None:
            _raise(_not_made(field, how=f"the events holding it given to {given_to}; "))


class _CutEventsArray(CutEvents):
    """``CutEvents`` of an array of events (pyarrow asks an array, not a record, for its arrow array)."""

    def __arrow_array__(self, type=None):
        self._check_whole("pyarrow")
        return super().__arrow_array__(type)


def _as_awkward_runs(func, args: tuple, kwargs: dict):
    """What awkward's high-level function FUNC (its dispatcher, which found an override: ``CutEvents``) gives ARGS and
    KWARGS: its implementation run as the dispatcher runs it when no argument overrides it (awkward 2.x: a generator
    that yields the arguments to dispatch on, then returns the result; or the result)."""
    run = func.__wrapped__(*args, **kwargs)
    if not inspect.isgenerator(run):
        return run
    next(run)
    try:
        next(run)
    except StopIteration as done:
        return done.value
    raise RuntimeError(f"ak.{func.__name__} yielded twice: not an awkward high-level function as hepvine knows them")


def _overrides_run() -> bool:
    """Whether this awkward's high-level functions can be run as they run without an override
    (``_as_awkward_runs``): dispatchers wrapping a generator function."""
    return inspect.isgeneratorfunction(getattr(ak.num, "__wrapped__", None))


# The name of an events class made for a cut (``_events_class``) in this module: pickle finds it by that name.
_EVENTS_CLASS = "CutEvents:"
_events_classes: dict[str, type] = {}


def _events_class(schemas: type) -> type:
    """SCHEMAS (a schema's events class: coffea's ``NanoEventsArray``, ``NanoEventsRecord``...) with ``CutEvents``:
    the same name to the user; to pickle (an array's behaviour holds it) an attribute of this module named after
    SCHEMAS' module and name, made again where it is unpickled (``__getattr__``)."""
    name = f"{_EVENTS_CLASS}{schemas.__module__.replace('.', '/')}:{schemas.__qualname__.replace('.', '/')}"
    if name not in _events_classes:
        mixed = _CutEventsArray if issubclass(schemas, ak.Array) else CutEvents
        _events_classes[name] = type(schemas.__name__, (mixed, schemas), {"__module__": __name__, "__qualname__": name})
    return _events_classes[name]


def __getattr__(name: str):
    """An events class made for a cut (``_events_class``), by its name: as pickle looks it up."""
    if not name.startswith(_EVENTS_CLASS):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, qualname = name.removeprefix(_EVENTS_CLASS).partition(":")
    schemas = importlib.import_module(module.replace("/", "."))
    for part in qualname.split("/"):
        schemas = getattr(schemas, part)
    return _events_class(schemas)


@functools.cache
def _behavior(schema: type) -> dict:
    """SCHEMA's behaviour with the placeholder's, and its events classes with ``CutEvents`` (where this awkward's
    functions can be run as they run without an override: else the events' are the schema's, and awkward's functions
    given them see a placeholder as a record of no fields, as before). Made once a schema: awkward keys its lookups on
    the dict."""
    behavior = {**schema.behavior(), ("*", UNREAD): UnreadArray, UNREAD: UnreadRecord}
    if _overrides_run():
        for key in (EVENTS, ("*", EVENTS)):
            made = behavior.get(key)
            if isinstance(made, type) and issubclass(made, (ak.Array, ak.Record)):
                behavior[key] = _events_class(made)
    return behavior


@dataclasses.dataclass(frozen=True)
class Cut:
    """How a layout's chunks are made for one trace: from BASE (the cut base form, pickled), into FIELDS (the schema's
    top-level fields from every branch, in order), of which those in UNREAD are placeholders (their forms, by name);
    AGAIN: the warnings the schema gives from every branch but not of the cut base form
    (``schemaform.GivenWarning``), given again with each chunk as the Runner's schema gives them."""

    base: bytes
    fields: tuple
    unread: dict
    again: tuple = ()


@functools.cache
def _quiet(schema: type) -> type:
    """SCHEMA, without its warnings of a missing cross-reference (NanoAODSchema's ``warn_missing_crossrefs``): of the
    cut base form, it would warn of the indices left out with their collections, which the file has. Where SCHEMA has
    no such switch it is SCHEMA (``plan`` then gives no cut if the cut base form warns of more)."""
    if not hasattr(schema, "warn_missing_crossrefs"):
        return schema
    return type(schema.__name__, (schema,), {"warn_missing_crossrefs": False, "__module__": schema.__module__})


class CutSchema(BaseSchema):
    """The events of a cut (``Cut``): SCHEMA's form of the cut base form, with a placeholder for each unread field and
    the warnings SCHEMA gives from every branch. Passed to coffea as ``functools.partial(CutSchema, schema=...,
    cut=..., built=...)``: coffea calls it with the base form. With BUILT (``built``: that form made once for the
    cut's chunks) the base form's metadata is all that is read: the form is a copy of BUILT's, the schema not run."""

    def __init__(self, base_form: dict, *, schema: type, cut: Cut, built: schemaform.Built | None = None):
        if built is not None:
            made = schemaform.BuiltSchema(base_form, schema=schema, built=built).form
        else:
            made = _with_placeholders(_quiet(schema)(base_form).form, cut)
        for warning in cut.again:
            warning.give()
        self._schema = schema
        self._form = made

    def behavior(self) -> dict:
        return _behavior(self._schema)


def _with_placeholders(made: dict, cut: Cut) -> dict:
    """MADE, the schema's form of CUT's base form, with CUT's top-level fields in order, a placeholder for each
    unread."""
    contents = dict(zip(made["fields"], made["contents"]))
    return {
        **made,
        "fields": list(cut.fields),
        "contents": [cut.unread[name] if name in cut.unread else contents[name] for name in cut.fields],
    }


def built(cut: Cut, schema: type, metadata: dict) -> schemaform.Built | str:
    """The events' form of CUT's chunks made once for them (``schemaform.built`` of its base form with SCHEMA, made
    quiet as ``CutSchema`` runs it, METADATA the first chunk's), its placeholders in place; or why not (a string: each
    chunk then runs the schema). A 100,000-event chunk of the NanoAOD layout for the AGC selection: ~1.1 ms less to
    make (the 500,000-event ZSTD bench copy's 5 chunks: 19.9 -> 14.4 ms, median of 28 alternated, CPU time)."""
    found = schemaform.built(cut.base, _quiet(schema), metadata)
    if isinstance(found, str):
        return found
    made = _with_placeholders(pickle.loads(found.form), cut)
    return dataclasses.replace(found, form=pickle.dumps(made, protocol=pickle.HIGHEST_PROTOCOL))


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
    gives each kept field the form, and the events the parameters, that it gives them from every branch, and no
    warning it does not give from every branch (``_quiet``'s are not given; ``Cut.again`` gives the Runner's)."""
    full, runners = schemaform.recorded(schema, copy.deepcopy(base_form))
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
        made, cuts = schemaform.recorded(_quiet(schema), cut)
    except Exception as e:  # a schema of the user's that needs what the cut left out: the file gets every field
        return f"{schema.__name__} fails on the cut base form: {type(e).__name__}: {e}"
    contents = dict(zip(made["fields"], made["contents"]))
    differ = [n for n, c in zip(full["fields"], full["contents"]) if n in kept and contents.get(n) != c]
    if differ:
        return f"{', '.join(differ)} would differ from the Runner's"
    if made["parameters"] != full["parameters"]:
        return "the events' parameters would differ from the Runner's"
    given = collections.Counter((w.category, w.text) for w in cuts)
    more = given - collections.Counter((w.category, w.text) for w in runners)
    if more:
        return f"the cut base form gives warnings the file does not ({next(iter(more))[1]})"
    again = []
    for warning in runners:  # those the cut base form does not give itself, in order
        if given[warning.category, warning.text]:
            given[warning.category, warning.text] -= 1
        else:
            again.append(warning)
    unread = {n: _placeholder(n, c) for n, c in zip(full["fields"], full["contents"]) if n not in kept}
    return Cut(base, tuple(full["fields"]), unread, tuple(again))


class _Nowhere:
    """A file that keeps nothing written to it."""

    def write(self, data) -> int:
        return len(data)


class _Walk(pickle.Pickler):
    """Pickles to nowhere, the buffers of arrays out of band (not copied), raising ``NotRead`` at a placeholder: in an
    awkward array's form (an array of the events' fields, or a placeholder itself; high-level or a layout), whose
    buffers are then left unread."""

    def reducer_override(self, obj):
        if isinstance(obj, (ak.Array, ak.Record, ak.contents.Content, ak.record.Record)):
            field = _unread_in(obj)
            if field is not None:
                raise NotRead(_not_made(field, how="the analysis returned it (or an array holding it) in its output; "))
            return int, ()  # what the output holds is sent later: only its form is looked at here
        return NotImplemented


def _unread_in(obj) -> str | None:
    """The field of the first placeholder in OBJ (an awkward array or record, high-level or a layout: its form), or
    None."""
    layout = obj.layout if isinstance(obj, (ak.Array, ak.Record)) else obj
    stack = [(layout.array if isinstance(layout, ak.record.Record) else layout).form]
    while stack:
        node = stack.pop()
        if node.parameters.get("__record__") == UNREAD:
            return node.parameters.get(FIELD)
        stack.extend(getattr(node, "contents", ()))  # a record's, a union's
        content = getattr(node, "content", None)  # a list's, an option's... (a record's is a method)
        if isinstance(content, ak.forms.Form):
            stack.append(content)
    return None


def check_output(output) -> None:
    """Raise ``NotRead`` if OUTPUT (an analysis's, of a cut chunk) holds a placeholder anywhere: in a dict, a list, an
    accumulator, an object of the user's (whatever pickling reaches), in an awkward array's form. Its arrays' buffers
    are not copied nor read. An output that cannot be pickled is left to fail where it is sent, as it would with every
    field."""
    try:
        _Walk(_Nowhere(), protocol=5, buffer_callback=lambda buffer: False).dump(output)
    except (pickle.PicklingError, TypeError, AttributeError):  # not picklable: it fails where the job sends it,
        return  # with its own error, as with every field
