"""The per-file record: what happened to one input file of a campaign — its identity, the events and bytes read,
where and how it was read, how long it took, and, if it failed, the failure's class, cause and fix.

Every file of the spec ends as exactly one record, ok or failed; the report reconciles them with the spec. A failure
has one of two classes (``hepvine.reading.failures.classify`` decides which, once, from the exception):

- ``transient``: the file may well be read next time (a network error, a timeout, a cache or the origin down, a full
  disk on the worker). Retried inside the run (``hepvine.reading.fetch``) and again by running the same command.
- ``permanent``: the analysis failed on the file (``analysis-error``: an exception in the user's code, with its
  frame), or the file itself is wrong for this campaign (not a ROOT file, a tree or branch it lacks, an era
  that cannot be decided or whose branches it lacks — ``hepvine.model.eras`` —, a corrupt basket, a spec entry that
  disagrees with the file). Never retried automatically; the fix says what to do.

Exceptions that are neither (a bug in hepvine) are not records: they fail the job loudly, once. This module is the
data model only: it imports no ROOT I/O, so the workflow's parse (which imports it through the spec) stays light.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

TRANSIENT, PERMANENT = "transient", "permanent"
# How a permanent failure is retried once its cause is fixed (hepvine.products.retries: a replaced or restored file,
# or a changed spec entry, reruns its job; nothing else does).
RERUN_FIXED = "then run the same command again: it reruns the jobs of the files whose source or spec entry changed"


class FileProblem(ValueError):
    """A problem of the input file itself (permanent), raised by hepvine's own checks; KIND names it."""

    def __init__(self, kind: str, message: str, fix: str):
        super().__init__(message)
        self.kind, self.fix = kind, fix


class AnalysisError(RuntimeError):
    """An exception raised by the user's analysis on one file (permanent: the analysis must change, not the file);
    WHERE is the user's frame that raised it (file:line in function)."""

    def __init__(self, message: str, where: str):
        super().__init__(f"{message} (at {where})")
        self.message, self.where = message, where

    def __reduce__(self):
        return type(self), (self.message, self.where)


class FieldNotMade(AnalysisError):
    """A chunk cut to the fields the analysis's trace read (``hepvine.work.cutform``) was processed with a field it was
    made without: a ``NotRead`` raised (whether or not the analysis caught it) or a placeholder returned. With config
    ``columns: traced`` the file's ``analysis-error``; with ``columns: auto`` the job runs the file again with every
    field (``hepvine.jobs.driver``)."""


@dataclass(frozen=True)
class Failure:
    kind: (
        str  # e.g. "unreachable", "credential", "missing-file", "not-root", "missing-branch", "unknown-era", "corrupt",
    )
    # "disk-full", "truncated"
    failure_class: str  # TRANSIENT or PERMANENT
    cause: str  # the exception, with the file it concerns
    fix: str  # what the user should do


@dataclass
class FileRecord:
    """One input file's outcome. ``fid`` is its identity in the campaign (``<process>/<variation>/<index>``)."""

    fid: str
    path: str
    process: str
    variation: str
    batch: str  # the job that ran it (files/<batch>.pkl)
    events: int = 0
    bytes_read: int = 0
    read_from: str | None = None
    host: str = ""
    start: float = 0.0
    end: float = 0.0
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    fetch: dict | None = None  # how the original was read (hepvine.reading.fetch.record), with its bytes and times
    recompress: dict | None = None  # codec, source/copy bytes, seconds, MB/s, when the input was recompressed
    cache: str | None = None
    rack: str | None = None
    worker_rack: str | None = None
    analysis_worker_rack: str | None = None
    failure: Failure | None = None
    # With config columns: auto, why the file ran again with every field (its first run's FieldNotMade), if it did.
    rerun: str | None = None
    # The version of the analysis the file's job ran (hepvine.model.sources.version: a digest of its local files).
    analysis: str | None = None
    traceback: str | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def error(self) -> str | None:
        return self.failure.cause if self.failure else None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "FileRecord":
        data = dict(data)
        if data.get("failure") is not None:
            data["failure"] = Failure(**data["failure"])
        return cls(**data)
