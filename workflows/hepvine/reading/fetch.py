"""Reading one input file over its route (``site.Route.as_dict()``): the home cache first, then each fail-over in
turn when a source cannot be read, and a record of how it went — which source served the file, its cache and rack,
the rack of the worker that read it, and every source that failed with its cause.

A task learns its worker's rack from ``SNAKEMAKE_TASKVINE_WORKER_GROUP`` (set by the TaskVine executor; a site's
worker groups are named after their racks). Only I/O errors (``OSError``: refused connections, timeouts, missing
files) move on to the next source; anything else is a problem of the file itself and is raised at once. When every
source failed, the round is tried again after a back-off (doubling, with jitter) up to ``Retry.attempts`` rounds —
a cache or the origin that is down for a few seconds costs a wait, not the file — unless no round can help: every
source said the file does not exist, or refused the job's credential, or served the file shorter than its structure
says (``short_read``; some may have said it does not exist).
"""

from __future__ import annotations

import errno
import json
import os
import random
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

from hepvine.routing import site

WORKER_GROUP_ENV = "SNAKEMAKE_TASKVINE_WORKER_GROUP"
# Errors of the worker's own disk while a reader writes (staging a source, a recompressed copy): raised at once, not
# a failed source (found by tests/workflow/test_disk_full.py: a full disk was recorded as "unreachable").
LOCAL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
# What XRootD says when a server does not authenticate the reader: no credential, an expired one, or one of an
# authority it does not trust.
AUTHENTICATION_REFUSED = "Auth failed"
# XRootD client settings a job starts with unless the site config or the job's environment sets them. XRootD remembers
# a connection's fatal error for XRD_STREAMERRORWINDOW seconds (default 1800) and fails every later read of that
# server at once: the rounds of ``read`` would never reach a cache or origin that is back (measured in
# tests/chaos/test_faults.py: all three servers down 30 s, every later round "[FATAL] Connection error").
XROOTD_DEFAULTS = {"XRD_STREAMERRORWINDOW": "1"}
# What uproot says when a source served fewer bytes than the file's own structure points to (``Chunk.wait``): the
# file there ends early (an interrupted transfer, an empty file, a few bytes that are not ROOT). The source answered:
# another round reads the same bytes.
SHORT_READ = "expected Chunk of length"
T = TypeVar("T")


class FetchError(OSError):
    """Every source of a file failed; the message lists each with its cause. ``missing``: every source said the
    file does not exist; ``refused``: every source refused the job's credential; ``truncated``: every source that has
    the file served it shorter than its structure says (``short_read``)."""

    def __init__(self, message: str, missing: bool, refused: bool = False, truncated: bool = False):
        super().__init__(message)
        self.missing = missing
        self.refused = refused
        self.truncated = truncated


class CutShort(OSError):
    """A source's file is shorter than its ROOT header says (``fEND``): a read past its end failed. Another source may
    have it whole; this one, read again, fails alike (``short_read``)."""


@dataclass(frozen=True)
class Retry:
    """How often to go over a file's sources (ATTEMPTS rounds) and how long to wait before the second round
    (BACKOFF_S, doubled each further round, times a random factor in [0.5, 1.5))."""

    attempts: int = 3
    backoff_s: float = 2.0

    def wait_s(self, round_: int) -> float:
        return self.backoff_s * 2 ** (round_ - 1) * (0.5 + random.random())


def local_route(path: str, replicas: tuple[str, ...] = ()) -> dict:
    """The route of a file read where it is, then at its other REPLICAS in order (with no site config)."""
    urls = dict.fromkeys((path, *replicas))
    return site.Route(lfn=path, sources=tuple(site.Source(url=u) for u in urls)).as_dict()


def parse_route(text: str | None, path: str) -> dict:
    """The route given on a command line (JSON), or PATH read where it is."""
    return json.loads(text) if text else local_route(path)


def _missing(error: OSError) -> bool:
    return isinstance(error, FileNotFoundError) or "no such file" in str(error).lower()


def short_read(error: OSError) -> bool:
    """Whether a source served the file shorter than its own structure says (``SHORT_READ``, ``CutShort``)."""
    return isinstance(error, CutShort) or SHORT_READ in str(error)


def credential_refused(error: OSError) -> bool:
    """Whether a source (or, for a FetchError, every source) refused to authenticate the reader (no credential, an
    expired or unknown one)."""
    return AUTHENTICATION_REFUSED in str(error)


def read(route: dict, reader: Callable[[str], T], retry: Retry = Retry()) -> tuple[T, dict]:
    """READER(url) for the first of ROUTE's sources that can be read, going over them up to RETRY.attempts times;
    (its result, the fetch record, whose ``failover`` lists every failed try)."""
    failed = []
    for round_ in range(1, retry.attempts + 1):
        errors = []
        for source in route["sources"]:
            try:
                result = reader(source["url"])
            except OSError as e:
                if e.errno in LOCAL_ERRNOS:  # the worker's own disk, not the source: no other source helps
                    raise
                errors.append(e)
                failed.append({**source, "error": f"{type(e).__name__}: {e}", "round": round_})
                continue
            return result, record(route, source, failed)
        # Another round helps neither a file no source has (or has whole), nor a credential every source refuses (a
        # job's credential does not change while it runs).
        missing, refused = all(_missing(e) for e in errors), all(credential_refused(e) for e in errors)
        truncated = not missing and all(_missing(e) or short_read(e) for e in errors)
        if missing or refused or truncated or round_ == retry.attempts:
            if missing:
                why = " (every source says the file does not exist)"
            elif truncated:
                why = " (every source that has the file serves it shorter than its structure says)"
            else:
                why = " (every source refused the credential)" if refused else f" in {round_} round(s)"
            raise FetchError(
                f"{route['lfn']}: no source could be read{why}: "
                + "; ".join(f"{f['url']} ({f['error']})" for f in failed[-len(errors) :]),
                missing,
                refused,
                truncated,
            )
        time.sleep(retry.wait_s(round_))
    raise AssertionError("unreachable: attempts >= 1")


def record(route: dict, source: dict, failed: list[dict]) -> dict:
    """How a file was read: from SOURCE, by a worker in which rack, after which FAILED sources."""
    return {
        "url": source["url"],
        "cache": source["cache"],
        "cache_rack": source["rack"],
        "home_cache": route["cache"],
        "rack": route["rack"],
        "worker_rack": os.environ.get(WORKER_GROUP_ENV) or None,
        "failover": failed,
    }
