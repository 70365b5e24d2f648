"""Which failure an exception means for the file being read: the one place where an exception becomes a file's
``records.Failure`` (``transient`` or ``permanent``, with its cause and fix), or is declared a bug (None: the caller
lets it propagate and the job fails loudly, once). Knows uproot's and the codecs' exception types; the records it
classifies for are plain data (``hepvine.model.records``)."""

from __future__ import annotations

import errno
import lzma
import zlib

import uproot

from hepvine.model.records import (
    PERMANENT,
    RERUN_FIXED,
    TRANSIENT,
    AnalysisError,
    Failure,
    FieldNotMade,
    FileProblem,
)
from hepvine.reading import fetch

# What XRootD says when the identity it authenticated may not read the file (kXR_NotAuthorized, 3010).
NOT_AUTHORIZED = ("[3010]", "not authorized", "Not authorized")
# What Python's mmap (uproot's MemmapSource: a recompressing job's staged copy) says of a file of 0 bytes.
EMPTY_FILE = "cannot mmap an empty file"


TRUNCATED_FIX = (
    "the file ends before its own structure says (an interrupted transfer, an empty file, or a few bytes that are not "
    "ROOT): replace it at its source or drop it from the spec; " + RERUN_FIXED
)


def _truncated_file(exc: OSError) -> bool:
    """Whether EXC says the file ends early: a FetchError whose every source served it short (its message may name
    one source that did among others that failed otherwise), or one source's short read."""
    return exc.truncated if isinstance(exc, fetch.FetchError) else fetch.short_read(exc)


def _truncated(cause: str) -> Failure:
    """A file that ends before its own structure says, or is empty (read locally, or every source serves it so)."""
    return Failure("truncated", PERMANENT, cause, TRUNCATED_FIX)


def _cause(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def first_line(exc: BaseException) -> str:
    """EXC's type and the first line of its message (uproot's messages run over several lines)."""
    lines = str(exc).splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def classify(exc: BaseException) -> Failure | None:
    """The failure EXC means for the file being read, or None if it is not a problem of the file or its access
    (then it is a bug, and the caller lets it propagate)."""
    cause = _cause(exc)
    rerun = "run the same command again: transient failures are retried"
    if isinstance(exc, FileProblem):
        return Failure(exc.kind, PERMANENT, cause, exc.fix)
    if isinstance(exc, FieldNotMade):  # (config columns: traced; with auto the file runs again instead)
        return Failure(
            "analysis-error",
            PERMANENT,
            cause,
            f"the analysis used a field its trace did not see read (at {exc.where}): set config columns: auto (such "
            "a file runs again with every field) or all, and run the same command again",
        )
    if isinstance(exc, AnalysisError):
        return Failure(
            "analysis-error",
            PERMANENT,
            cause,
            f"the analysis raised this at {exc.where}: fix it there (or in analysis_args) and run the same "
            "command again: a changed analysis file or analysis_args reruns the campaign's jobs",
        )
    if isinstance(exc, uproot.KeyInFileError):
        return Failure(
            "missing-branch",
            PERMANENT,
            cause,
            "the file lacks a tree or branch the analysis needs: if it is of another era, set `era` for "
            "its process in the spec (docs/eras.md), else replace it or drop it from the spec; " + RERUN_FIXED,
        )
    if isinstance(exc, uproot.deserialization.DeserializationError) or isinstance(exc, (zlib.error, lzma.LZMAError)):
        return Failure(
            "corrupt",
            PERMANENT,
            cause,
            "the file is corrupt (a basket or key cannot be read): replace it at the source; " + RERUN_FIXED,
        )
    if isinstance(exc, OSError):
        if exc.errno == errno.ENOSPC:
            return Failure(
                "disk-full", TRANSIENT, cause, "a worker's disk is full: free space or raise disk_mb; " + rerun
            )
        if isinstance(exc, FileNotFoundError) or getattr(exc, "missing", False):  # fetch.FetchError.missing
            return Failure(
                "missing-file",
                PERMANENT,
                cause,
                "no source has the file: correct its path in the spec or restore it; " + RERUN_FIXED,
            )
        if _truncated_file(exc):
            return _truncated(cause)
        if fetch.credential_refused(exc):
            return Failure(
                "credential",
                TRANSIENT,
                cause,
                "the storage refused the job's credential (none was sent, it expired, or its authority is not "
                "trusted there): renew it (voms-proxy-init -voms <your VO>; htgettoken for a token), check the site "
                "config's credentials, and " + rerun,
            )
        if any(words in str(exc) for words in NOT_AUTHORIZED):
            return Failure(
                "not-authorized",
                TRANSIENT,
                cause,
                "the storage knows the credential but does not let it read this file: check that its VO groups "
                "(voms-proxy-info --fqan) or the token's scopes cover the path, or ask the site; then " + rerun,
            )
        return Failure(
            "unreachable", TRANSIENT, cause, "no source could be read in time (cache or origin down, network): " + rerun
        )
    if isinstance(exc, ValueError) and EMPTY_FILE in str(exc):
        return _truncated(cause)
    if isinstance(exc, ValueError) and ("not a ROOT file" in str(exc) or "file header" in str(exc)):
        return Failure(
            "not-root",
            PERMANENT,
            cause,
            "the file is not a ROOT file: replace it or drop it from the spec; " + RERUN_FIXED,
        )
    return None
