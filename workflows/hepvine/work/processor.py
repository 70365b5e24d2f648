"""The user's analysis, run on one file as coffea's ``processor.Runner`` runs it: a ``coffea.processor.ProcessorABC``
subclass (instantiated once per job with the campaign's ``analysis_args``) or a plain function ``f(events) ->
accumulatable``, named ``<file.py>:<Name>`` or ``<module>:<Name>`` (config key ``analysis``).

A file is cut into chunks with coffea's arithmetic (``chunks``: ``chunksize`` entries, evened out over the file; or
the steps of a preprocessed fileset), each chunk becomes NanoEvents exactly as the Runner makes them
(``NanoEventsFactory.from_root(..., mode="virtual")`` with the schema of config key ``schema`` and the metadata
``dataset``, ``filename``, ``treename``, ``entrystart``, ``entrystop``, ``fileuuid`` plus the dataset's own), and the
chunks' outputs are added with ``coffea.processor.accumulate`` in chunk order. TTree and RNTuple alike.

The columns a chunk needs are read in bulk from files read over the network (``NETWORK_SCHEMES``): the first time a job
meets a dataset there in a tree's layout, the analysis is traced on an empty chunk of its file
(``coffea.nanoevents.trace.trace``: awkward's typetracer, as coffea's Runner does with ``trace=``), and every chunk of
that dataset and layout then preloads those branches with one ``tree.arrays`` call (one vector read over XRootD) instead
of one read per branch as the analysis touches them, each waiting for the one before. What a trace cannot see (a column
touched only for some events) is still read lazily; a trace that fails leaves the chunks lazy. It changes what is read
when, never what the analysis computes. ``Analysis.traced`` keeps the traces (a file's own process sends its trace back:
hepvine.jobs.driver). A local file (a recompressed copy, a file on a shared filesystem) is read lazily, kept open
(``local_source``): there a read waits for no network, and the bulk read cost more than it saved (the processor
bench: 1-8% slower on LZMA files, 17-18% on ZSTD copies).

By default (config ``columns: auto``; ``Analysis.columns``) every file is traced so, local ones too, and each chunk's
fields that the trace did not see read are placeholders (``hepvine.work.cutform``): ``events.fields`` is the Runner's
and every field the analysis reads is made as the Runner makes it (checked once a layout and trace against the form
from every branch), but made from the collections it reads instead of the tree's every branch, far cheaper (the
processor bench, the AGC on a 200,000-event file: 1.15 -> 1.07 times a native selection's time, 1.29 -> 1.12 on its
ZSTD copy). Traced once a job, dataset and layout: an analysis may read a field only where a file has it. A field
the trace did not see read (read only for some events) raises ``cutform.NotRead`` at its first use, and so does a
chunk whose processing caught a ``NotRead`` or returned a placeholder (``_checked``): ``FieldNotMade``, on which the
job runs the file again with every field (``hepvine.jobs.driver``), or with ``columns: traced`` the file's
``analysis-error``, naming the field and ``columns: all`` (every field, always). Plain trees only (NanoAOD's); for
others, or where the check or the trace fails, every field is made (a warning in the job's log says why).

A chunk's NanoEvents are made by ``hepvine.work.nanoevents.FileChunks``: what ``from_root`` makes, with the tree's
base form derived once for a job's files of one layout (``Analysis.forms``, sent back from a file's own process like
the traces) and the count branches it reads taken from the offsets of the branches they count (preloaded; or read
lazily: those of its trace, or of what the file's chunks before read).

What goes wrong is said per file: a file that NanoEvents cannot read is a permanent ``not-nanoevents`` failure; an
exception raised by the user's code is an ``records.AnalysisError`` naming the user's frame (file:line), which
``failures.classify`` makes the file's permanent ``analysis-error`` — unless it is a read failure (an XRootD error
or a missing branch seen while NanoEvents loaded a column, ``_read_by_events``), which keeps its own class; the same
classes raised by the user's own code (a corrections file it cannot open) are its error. coffea is imported only here
(and by the merge and the products): never while the workflow parses.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import importlib
import importlib.util
import math
import os
import sys
import traceback
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from hepvine.model.records import AnalysisError, FieldNotMade, FileProblem
from hepvine.reading import failures, fetch
from hepvine.work import nanoevents

DEFAULT_SCHEMA = "NanoAODSchema"
DEFAULT_CHUNKSIZE = 100_000  # coffea's Runner's default
COLUMNS = ("auto", "all", "traced")  # config ``columns``; the first is its default


class AnalysisSpecError(ValueError):
    """The config's ``analysis`` (or its arguments or schema) cannot be used; the message says what to change."""


@dataclass
class Analysis:
    """A loaded analysis: the processor (or function), where it was defined, and how files are cut and read."""

    name: str  # as the config gives it
    instance: object
    source: str | None  # the file that defines it (its frames are the user's)
    schema: type
    chunksize: int
    # config ``columns`` (``COLUMNS``): "auto" and "traced" make the fields the analysis does not read placeholders
    columns: str = COLUMNS[0]
    # The branches the analysis reads, by (dataset, tree, layout: ``nanoevents.layout_key``, None for trees of other
    # branches): traced once a job (None: the trace failed; read lazily), the least recently used dropped beyond
    # ``nanoevents.KEPT_FORMS``.
    traced: dict = field(default_factory=dict)
    # The base forms of the trees met so far, by layout (``nanoevents.layout_key``): a job's files after the first of
    # a layout derive none (``nanoevents.FileChunks``); the schema's forms of them (``FileChunks._built``); with
    # columns: auto or traced, their cuts (``FileChunks.cut_to``) and the schema's forms of those too.
    forms: dict = field(default_factory=dict)

    @property
    def is_processor(self) -> bool:
        from coffea.processor import ProcessorABC

        return isinstance(self.instance, ProcessorABC)

    def process(self, events):
        return self.instance.process(events) if self.is_processor else self.instance(events)

    def postprocess(self, output):
        """coffea's Runner: postprocess's return value replaces the output unless it is None."""
        if not self.is_processor:
            return output
        result = self.instance.postprocess(output)
        return output if result is None else result


def _import(spec: str):
    """(the object named by SPEC, the file that defines it)."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise AnalysisSpecError(
            f"analysis={spec!r}: name it as <file.py>:<Name> or <module>:<Name>, e.g. "
            "analyses/dimuon.py:DimuonProcessor"
        )
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise AnalysisSpecError(
                f"analysis={spec!r}: no such file {path} (paths are relative to the directory snakemake runs in)"
            )
        module_name = f"hepvine_analysis_{path.stem}"
        loader = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(loader)
        sys.modules[module_name] = module  # dataclasses and pickling look their module up here
        # Its sibling modules import as they would for the user, for as long as the job runs (an import inside a
        # function happens at its call): the directory as the spec names it (hepvine.model.sources ships from there).
        beside = str(path.absolute().parent)
        if beside not in sys.path:
            sys.path.insert(0, beside)
        try:
            loader.loader.exec_module(module)
        except ModuleNotFoundError as e:
            raise _not_importable(spec, str(path), e) from e
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as e:
            if e.name is not None and not (where == e.name or where.startswith(f"{e.name}.")):
                raise _not_importable(spec, where, e) from e
            raise AnalysisSpecError(
                f"analysis={spec!r}: cannot import {where} ({e}); give a file (<file.py>:<Name>) "
                "or install the module where the jobs run"
            ) from e
    if not hasattr(module, name):
        raise AnalysisSpecError(f"analysis={spec!r}: {where} defines no {name!r}")
    return getattr(module, name), getattr(module, "__file__", None)


def _not_importable(spec: str, where: str, error: ModuleNotFoundError) -> AnalysisSpecError:
    """The error of the analysis SPEC whose file or module WHERE imports a module that cannot be imported here."""
    return AnalysisSpecError(
        f"analysis={spec!r}: {where} imports {error.name!r}, which cannot be imported here ({error}): a module of "
        "your own beside the analysis file or in the directory snakemake runs in is sent with its jobs; install any "
        "other where the jobs run (for workers with nothing installed: hepvine pack-env, --taskvine-environment)"
    )


def make_importable(spec: str) -> None:
    """Import the module of the analysis SPEC (without instantiating anything), so that what its jobs pickled unpickles
    here: the outputs a merge, the report or the plots read may hold instances of the user's own classes (an
    accumulator of their own), pickled by reference to its module."""
    _import(spec)


def schema_class(name: str) -> type:
    """The NanoEvents schema called NAME (``NanoAODSchema``, ``BaseSchema``, ``PHYSLITESchema``, ...)."""
    from coffea.nanoevents import schemas

    found = getattr(schemas, name, None)
    if not (isinstance(found, type) and issubclass(found, schemas.BaseSchema)):
        known = sorted(n for n in dir(schemas) if n.endswith("Schema") and isinstance(getattr(schemas, n), type))
        raise AnalysisSpecError(f"schema={name!r} is not a NanoEvents schema; use one of {', '.join(known)}")
    return found


def load(
    spec: str,
    args: dict | None = None,
    schema: str = DEFAULT_SCHEMA,
    chunksize: int = DEFAULT_CHUNKSIZE,
    columns: str = COLUMNS[0],
) -> Analysis:
    """The analysis SPEC names, instantiated with ARGS when it is a processor class, its chunks made with COLUMNS
    (``COLUMNS``: those it reads and placeholders for the others, run again with every field if that falls short;
    every field; or those it reads, failing the file if that falls short)."""
    if columns not in COLUMNS:
        raise AnalysisSpecError(f"columns={columns!r}: use one of {', '.join(COLUMNS)}")
    from coffea.processor import ProcessorABC

    found, source = _import(spec)
    args = args or {}
    if isinstance(found, type) and issubclass(found, ProcessorABC):
        try:
            instance = found(**args)
        except TypeError as e:
            raise AnalysisSpecError(
                f"analysis={spec!r}: {found.__name__}({', '.join(f'{k}=...' for k in args)}) "
                f"failed: {e}; correct analysis_args"
            ) from e
    elif isinstance(found, type):
        raise AnalysisSpecError(
            f"analysis={spec!r}: {found.__name__} is a class but not a "
            "coffea.processor.ProcessorABC; subclass it, or name a function f(events)"
        )
    elif callable(found):
        if args:
            raise AnalysisSpecError(
                f"analysis={spec!r} is a function: it takes no analysis_args (only a processor "
                "class is instantiated with them); drop analysis_args"
            )
        instance = found
    else:
        raise AnalysisSpecError(
            f"analysis={spec!r}: {type(found).__name__} is neither a processor class nor a function"
        )
    return Analysis(spec, instance, source, schema_class(schema), chunksize, columns)


def settle(analysis: Analysis) -> None:
    """Ready the process for ANALYSIS's files, once loaded: its schema's behaviours imported (coffea imports them at the
    first chunk), then every object alive (the modules, the analysis, and whatever cyclic garbage their imports left:
    a bounded one-off) moved out of the garbage collector's sight (``gc.freeze``). They live as long as the job;
    without this each full collection walks them again, and a chunk of the real NanoAOD layout makes objects enough
    (~8,000 virtual arrays) to set off several: a tenth to a fifth of a file's time (``make bench``). Called once per
    process before its first file (and in a file's forked process, which lives for that file): what is frozen is
    never freed."""
    analysis.schema.behavior()
    gc.freeze()


def chunks(num_entries: int, chunksize: int) -> list[tuple[int, int]]:
    """coffea's Runner's chunks of a file of NUM_ENTRIES (``FileMeta.chunks`` without cluster alignment): the file
    cut into max(round(NUM_ENTRIES / CHUNKSIZE), 1) chunks of equal size (rounded up; the last one smaller); an empty
    file is one empty chunk."""
    if num_entries == 0:
        return [(0, 0)]
    size = math.ceil(num_entries / max(round(num_entries / chunksize), 1))
    return [(start, min(num_entries, start + size)) for start in range(0, num_entries, size)]


def _user_frame(exc: BaseException | traceback.StackSummary, source: str | None) -> str:
    """Where in the user's code EXC was raised (or the stack EXC was): the deepest frame in SOURCE (the analysis's
    file), else the deepest frame outside coffea, awkward, uproot and the standard library."""
    frames = traceback.extract_tb(exc.__traceback__) if isinstance(exc, BaseException) else exc
    mine = [f for f in frames if source and Path(f.filename) == Path(source)]
    if not mine:
        mine = [
            f for f in frames if not any(p in f.filename for p in ("site-packages", "dist-packages", "/lib/python"))
        ]
    frame = (mine or frames)[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


# The URLs of files read over a network, whose chunks preload their traced branches (``preload``).
NETWORK_SCHEMES = ("root://", "roots://", "http://", "https://")


def over_network(url: str) -> bool:
    """Whether the file at URL is read over a network (not a local path, nor ``file://``)."""
    return url.lower().startswith(NETWORK_SCHEMES)


def local_source(url: str) -> type | None:
    """The uproot source that reads the file at URL: for a path on this machine's filesystem (a recompressed copy, a
    file on a shared filesystem) uproot's ``MultithreadedFileSource``, which keeps the file open, instead of its default
    (fsspec), whose reads each go through its event loop's thread, one a branch of a chunk read lazily; None (uproot's
    default) for a URL (``root://``, ``file:/...``: any name with a colon) and a path fsspec expands (``~/...``): that
    source opens the name as it is. The processor bench, the AGC on the local ZSTD copy of 500,000 events, best of 6
    alternated: 545 -> 521 ms a file, CPU time as wall time (one core); 1-3% on the other local files. What a read
    short of the file's end raises is uproot's own either way (``fetch.SHORT_READ``)."""
    if ":" in url or url.startswith("~"):
        return None
    import uproot.source.file

    return uproot.source.file.MultithreadedFileSource


def trace_key(task, made: nanoevents.FileChunks) -> tuple:
    """What a trace of the analysis is kept by (``Analysis.traced``): TASK's dataset and tree, and the tree's layout."""
    return (task.dataset, task.treename, made.layout())


def preload(analysis: Analysis, made: nanoevents.FileChunks, task, metadata: dict) -> frozenset | None:
    """The branches of TASK's tree (MADE: its file's chunks) that ANALYSIS reads, traced on an empty chunk the first
    time the job meets TASK's dataset and tree in that layout (then kept in ``analysis.traced``): an analysis may read
    a field only where a file has it. None when the trace fails (or finds nothing). The empty chunk is the file's like
    its others (``FileChunks``: the base form it derives is the one its chunks then share). Kept as
    ``nanoevents.kept_form`` keeps forms: the least recently used dropped beyond ``nanoevents.KEPT_FORMS``."""
    from coffea.nanoevents.trace import trace

    def traced_now() -> frozenset | None:
        try:
            # Quiet: coffea warns of each way of tracing it tries, and the schema gives the chunks' own warnings,
            # which the first chunk then gives (after a change of the filters, shown again: once, as the Runner's).
            # Those of the base form (uproot's, of branches it skips) were given when made.layout() derived it.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                empty = made.events({**metadata, "entrystart": 0, "entrystop": 0}, 0, 0, None)
                # coffea's trace gives an empty set when every way of tracing failed: nothing to preload.
                return frozenset(trace(analysis.process, empty)) or None
        except Exception:  # whatever the user's code does on a typetracer: the chunks are then read lazily
            return None

    return nanoevents.kept_form(analysis.traced, trace_key(task, made), traced_now)


def file_uuid(opened) -> str:
    """The UUID ROOT gave the file OPENED (by uproot) when it wrote it, as coffea reads it; '' where it has none."""
    return str(uuid.UUID(bytes=opened.file.fUUID)) if len(opened.file.fUUID) else ""


def _cut_short(opened) -> tuple[int, int] | None:
    """(the bytes the file OPENED has, the bytes its ROOT header says it has, ``fEND``) when it has fewer: a file cut
    short (an interrupted transfer), whose reads past its end fail as I/O errors of any source (uproot's short read
    locally; over XRootD the origin's "[3005] Unable to readv ...; illegal seek", an XCache's "[3000] ...; invalid
    argument"), where another round would fail alike. None otherwise, or when its size cannot be asked."""
    try:
        size = opened.file.source.num_bytes
    except OSError:
        return None
    return (size, opened.file.fEND) if size < opened.file.fEND else None


def run_file(url: str, task, analysis: Analysis) -> tuple[object, int, int]:
    """(the accumulated output, the events processed, the bytes read) of ANALYSIS over the file at URL (TASK: its
    dataset, tree, metadata, uuid and steps). ``events.metadata["filename"]`` is the file as the dataset names it
    (TASK's path), as coffea's Runner gives it, whichever cache or recompressed copy URL is. A read that fails on a
    file shorter than ROOT wrote it (``_cut_short``) says so (``fetch.CutShort``): the next source is read, and when
    none has the file whole it is the file's permanent ``truncated`` failure. A short read of a file that is whole is
    a fault of its source, read again like any other."""
    import uproot

    source = local_source(url)
    if source is not None and not os.path.exists(url):  # (said as the OS says it, not with uproot's page of help)
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), url)
    with uproot.open({url: None}, handler=source) as f:
        try:
            output, events = _run_chunks(url, task, analysis, f)
        except OSError as e:
            cut = _cut_short(f)
            if cut is not None:
                raise fetch.CutShort(
                    f"{url}: {cut[0]:,} bytes where its ROOT header says {cut[1]:,}, cut short "
                    f"({failures.first_line(e)})"
                ) from e
            if fetch.short_read(e):  # of a file that is whole (or whose size could not be asked): read it again
                raise OSError(
                    f"{url}: a read returned fewer bytes than asked of a file not shorter than its header says"
                ) from e
            raise
        return output, events, int(f.file.source.num_requested_bytes)


def _cut(made: nanoevents.FileChunks, read: frozenset | None, url: str, columns: str, fresh: bool) -> None:
    """MADE's chunks cut to the fields READ (the analysis's trace) reads (config COLUMNS ``auto`` or ``traced``), or a
    warning in the job's log saying why every field of the file at URL is made: with ``traced`` (asked for by name)
    for each file, with ``auto`` for the file whose trace is FRESH (made for it: once a job, dataset and layout)."""
    why = "the analysis's trace failed or read nothing" if read is None else made.cut_to(read)
    if why is not None and (columns == "traced" or fresh):
        warnings.warn(f"hepvine: columns={columns}: {url}: every field made, none cut ({why})", stacklevel=2)


def _read_by_events(exc: BaseException) -> bool:
    """Whether EXC, or an exception it was raised from, was raised while NanoEvents read a column of the file (through
    coffea's mapping, or the counts ``nanoevents`` takes): a failure of the file (a read, a missing branch), where the
    same class raised by the analysis's own code (its own files: a correction it cannot open) is its error."""
    while exc is not None:
        for frame, _ in traceback.walk_tb(exc.__traceback__):
            module = frame.f_globals.get("__name__", "")
            if module.startswith("coffea.nanoevents.mapping") or module == nanoevents.__name__:
                return True
        exc = exc.__cause__
    return False


@contextlib.contextmanager
def _making(url: str, task, analysis: Analysis):
    """The block makes the NanoEvents of TASK's tree in the file at URL: a read failure in it keeps its own class,
    anything else is the file's ``not-nanoevents``."""
    try:
        yield
    except Exception as e:
        if failures.classify(e) is not None:
            raise
        raise FileProblem(
            "not-nanoevents",
            f"{url}: {task.treename} cannot be read as NanoEvents with {analysis.schema.__name__}: "
            f"{type(e).__name__}: {e}",
            "check the file and the schema (config key schema); drop the file from the dataset if it is not NanoAOD",
        ) from e


def _checked(out, made: nanoevents.FileChunks, where: str, analysis: Analysis):
    """OUT, what ANALYSIS returned for a chunk of MADE (at WHERE: the file and entries), if it is an output the Runner
    would have had: not None and, of a cut chunk (``cutform``), neither a use of a placeholder the analysis caught
    nor a placeholder in it."""
    if out is None:
        raise AnalysisError(
            f"{where}: {analysis.name} returned None; process() must return an accumulatable (a dict of "
            "histograms, numbers, sets...)",
            analysis.name,
        )
    if made.cut is not None:
        from hepvine.work import cutform

        caught = cutform.used()
        if caught is not None:
            message, stack = caught
            user = _user_frame(stack, analysis.source)
            raise FieldNotMade(f"{where}: {analysis.name} caught NotRead: {message}", user)
        try:
            cutform.check_output(out)
        except cutform.NotRead as e:
            raise FieldNotMade(f"{where}: {analysis.name} returned a field not made: {e}", analysis.name) from e
    return out


def _run_chunks(url: str, task, analysis: Analysis, f) -> tuple[object, int]:
    """(the accumulated output, the events processed) of ANALYSIS over the chunks of TASK's tree in the file F
    (opened from URL): run_file's work."""
    from coffea.processor import accumulate

    from hepvine.work import cutform

    bulk, traced = over_network(url), analysis.columns != "all"
    made = nanoevents.FileChunks(f, task.treename, analysis.schema, analysis.forms)
    fileuuid = task.uuid or file_uuid(f)

    def metadata(start: int, stop: int) -> dict:
        return {
            "dataset": task.dataset,
            "filename": task.path,
            "treename": task.treename,
            "entrystart": start,
            "entrystop": stop,
            "fileuuid": fileuuid,
            **(task.metadata or {}),
        }

    with _making(url, task, analysis):  # (the tree's base form is derived here, for the trace's key)
        fresh = traced and trace_key(task, made) not in analysis.traced
        read = preload(analysis, made, task, metadata(0, 0)) if bulk or traced else None
        if traced:
            _cut(made, read, url, analysis.columns, fresh)
    output, events = None, 0
    for start, stop in task.steps or chunks(made.tree.num_entries, analysis.chunksize):
        with _making(url, task, analysis):
            chunk = made.events(metadata(start, stop), start, stop, read if bulk else None, read)
        where, length = f"{url} entries {start}-{stop}", len(chunk)  # (a step past the file's end: what it has)
        if made.cut is not None:
            cutform.used()  # (forget a use of another file's chunk)
        try:
            out = analysis.process(chunk)
        except Exception as e:
            if failures.classify(e) is not None and _read_by_events(e):  # the file's, seen through a lazy column
                raise
            message = f"{where}: {analysis.name} raised {type(e).__name__}: {e}"
            missed = cutform.used() if made.cut is not None else None
            if missed is None:
                raise AnalysisError(message, _user_frame(e, analysis.source)) from e
            if not isinstance(e, cutform.NotRead):  # (a use caught, then another error: the use is the cause)
                raise FieldNotMade(
                    f"{message}, after a use of a field not made: {missed[0]}", _user_frame(missed[1], analysis.source)
                ) from e
            raise FieldNotMade(message, _user_frame(e, analysis.source)) from e
        out = _checked(out, made, where, analysis)
        output = out if output is None else accumulate([out], output)
        events += length
        chunk = out = None  # gone before the next chunk is read and made
        # So are the arrays uproot's array cache keeps of it (up to 100 MB; coffea's mapping may ask it for a branch
        # twice in a chunk): the AGC on the 500,000-event ZSTD copy, a job's peak memory 422 -> 251 MB.
        f.file.array_cache.clear()
    return output, events
