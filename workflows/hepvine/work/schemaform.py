"""A NanoEvents schema's form of a tree's layout made once for all its chunks, not once a chunk as coffea's Runner
makes it (``hepvine.work.nanoevents.FileChunks``, every field made).

A chunk's schema (``NanoAODSchema``: its collections, cross-references and aliases of ~1,600 branches) is a fifth of
what a chunk of every field costs to make on the real NanoAOD layout, and its form depends on the layout's base form
alone: made once, a 100,000-event chunk of the 500,000-event ZSTD bench copy is made in 22.5 ms instead of 28 (median
of 10). ``built`` makes it once a layout (``Built``), and ``BuiltSchema`` gives each chunk a copy of it, with the
chunk's metadata, as the schema would have made it:

- the metadata the chunk is given, holding what the schema writes into it (``NanoAODSchema``: ``version``);
- the warnings the schema gives (a missing cross-reference...) given again with each chunk, as the schema gives them
  anew (``GivenWarning``: the same filters and registry as the schema's own ``warnings.warn``).

Checked once a layout against the schema itself: ``built`` makes the form twice, with the first chunk's metadata and
with none, and gives no ``Built`` (every chunk then runs the schema) when the forms, what it wrote into the metadata or
the warnings differ: a schema whose form reads the metadata it is given (a schema reading a metadata value only for
some values would not show there: coffea's own schemas read none). A form is made once for the schema's settings
(``settings``: its class attributes), made again when a processor changes them. Recording the warnings resets what
Python's filters remember of the warnings shown (as any ``warnings.catch_warnings`` does): once a layout a warning
shown before may be shown again (in a campaign each file runs in a process of its own, whose log shows them anyway).
``GivenWarning`` and ``recorded`` also serve ``hepvine.work.cutform``, whose cut chunks give the warnings of every
branch."""

from __future__ import annotations

import pickle
import sys
import types
import warnings
from dataclasses import dataclass

from coffea.nanoevents.schemas.base import BaseSchema


@dataclass(frozen=True)
class GivenWarning:
    """A warning as the schema gave it (``warnings.warn`` in MODULE, at FILENAME:LINENO)."""

    category: type
    text: str
    filename: str
    lineno: int
    module: str | None

    def give(self) -> None:
        """Give it again as ``warnings.warn`` gave it there: the same filters, shown once a place unless they say
        otherwise (the module's registry)."""
        module = sys.modules.get(self.module) if self.module else None
        if module is not None:
            registry = vars(module).setdefault("__warningregistry__", {})
        else:  # a module not found by its file: one of this process's own, by file
            registry = _registries.setdefault(self.filename, {})
        warnings.warn_explicit(self.text, self.category, self.filename, self.lineno, self.module, registry)


_registries: dict[str, dict] = {}  # GivenWarning.give's registries of warnings whose module it does not know


def recorded(schema: type, base_form: dict) -> tuple[dict, list[GivenWarning]]:
    """(SCHEMA's form of BASE_FORM, the warnings it gave)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        form = schema(base_form).form
    modules = {}
    if seen:  # (read from each module's namespace: no module's __getattr__ runs)
        modules = {vars(m).get("__file__"): n for n, m in list(sys.modules.items()) if isinstance(m, types.ModuleType)}
    found = [GivenWarning(w.category, str(w.message), w.filename, w.lineno, modules.get(w.filename)) for w in seen]
    return form, found


@dataclass(frozen=True)
class Built:
    """A schema's form of one layout's base form, for each of its chunks (``BuiltSchema``): FORM pickled, without its
    events' metadata; WRITTEN, what the schema writes into the metadata it is given; GIVEN, the warnings it gives."""

    form: bytes
    written: dict
    given: tuple


def built(base: bytes, schema: type, metadata: dict | None) -> Built | str:
    """SCHEMA's form of the base form BASE (pickled) made once for every chunk of its layout, or why not (a string):
    made with METADATA (the first chunk's: a schema that fails there fails as it would for the chunk) and with none,
    the two must be one form with the same warnings, and what the schema writes into the empty metadata must be all it
    changes of METADATA."""
    made = []
    for given in (dict(metadata or {}), {}):
        before = dict(given)
        form = pickle.loads(base)
        form["parameters"]["metadata"] = given
        try:
            form, seen = recorded(schema, form)
        except Exception as e:
            if not made:  # with the chunk's own metadata: the chunk's failure, as with the Runner
                raise
            return f"{schema.__name__} fails without metadata ({type(e).__name__}: {e})"  # each chunk runs it
        params = dict(form["parameters"])
        if params.pop("metadata", None) is not given:  # (BaseSchema keeps the dict it is given)
            return f"{schema.__name__} does not keep the metadata dict it is given"
        made.append(({**form, "parameters": params}, before, given, seen))
    (other, before, after, other_seen), (form, _, written, seen) = made
    if form != other:
        return f"{schema.__name__}'s form depends on the metadata it is given"
    if after != {**before, **written}:
        return f"{schema.__name__} changes the metadata it is given by what it holds"
    if [(w.category, w.text, w.filename, w.lineno) for w in seen] != [
        (w.category, w.text, w.filename, w.lineno) for w in other_seen
    ]:
        return f"{schema.__name__}'s warnings depend on the metadata it is given"
    return Built(pickle.dumps(form, protocol=pickle.HIGHEST_PROTOCOL), written, tuple(seen))


def settings(schema: type) -> bytes | None:
    """What SCHEMA's classes hold besides their methods (its settings: NanoAODSchema's ``warn_missing_crossrefs``,
    ``mixins``, cross-references...), pickled: a form made once is for these settings only (a processor may change
    them between chunks, as the Runner's next chunk would follow). None when they cannot be pickled. ~12 us."""
    found = [
        (cls.__qualname__, name, value)
        for cls in schema.__mro__
        for name, value in vars(cls).items()
        if not name.startswith("__")
        and not callable(value)
        and not isinstance(value, (classmethod, staticmethod, property))
    ]
    try:
        return pickle.dumps(found, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None


class BuiltSchema(BaseSchema):
    """What SCHEMA makes of a chunk of the layout of BUILT (``built``), without running it: its form, copied, with the
    chunk's metadata (what coffea puts in the base form it gives) holding what the schema writes there, and its
    warnings given again. Passed to coffea as ``functools.partial(BuiltSchema, schema=..., built=...)``: coffea calls
    it with the base form, of which only the metadata is read."""

    def __init__(self, base_form: dict, *, schema: type, built: Built):
        for warning in built.given:
            warning.give()
        metadata = base_form.get("parameters", {}).get("metadata")
        if metadata is None:  # (as BaseSchema: none given is an empty one)
            metadata = {}
        metadata.update(built.written)
        self._schema = schema
        self._form = pickle.loads(built.form)
        self._form["parameters"]["metadata"] = metadata

    def behavior(self) -> dict:
        return self._schema.behavior()
