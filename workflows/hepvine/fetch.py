"""Reading one input file over its route (``site.Route.as_dict()``): the home cache first, then each fail-over in
turn when a source cannot be read, and a record of how it went — which source served the file, its cache and rack,
the rack of the worker that read it, and every source that failed with its cause.

A task learns its worker's rack from ``SNAKEMAKE_TASKVINE_WORKER_GROUP`` (set by the TaskVine executor; a site's
worker groups are named after their racks). Only I/O errors (``OSError``: refused connections, timeouts, missing
files) move on to the next source; anything else is a problem of the file itself and is raised at once.
"""

from __future__ import annotations

import json
import os
from typing import Callable, TypeVar

from hepvine import site

WORKER_GROUP_ENV = "SNAKEMAKE_TASKVINE_WORKER_GROUP"
T = TypeVar("T")


class FetchError(OSError):
    """Every source of a file failed; the message lists each with its cause."""


def local_route(path: str) -> dict:
    """The route of a file read where it is (what a site gives a path that is not a root:// URL)."""
    return site.Route(lfn=path, sources=(site.Source(url=path),)).as_dict()


def parse_route(text: str | None, path: str) -> dict:
    """The route given on a command line (JSON), or PATH read where it is."""
    return json.loads(text) if text else local_route(path)


def read(route: dict, reader: Callable[[str], T]) -> tuple[T, dict]:
    """READER(url) for the first of ROUTE's sources that can be read; (its result, the fetch record)."""
    failed = []
    for source in route["sources"]:
        try:
            result = reader(source["url"])
        except OSError as e:
            failed.append({**source, "error": f"{type(e).__name__}: {e}"})
            continue
        return result, record(route, source, failed)
    raise FetchError(f"{route['lfn']}: no source could be read: "
                     + "; ".join(f"{f['url']} ({f['error']})" for f in failed))


def record(route: dict, source: dict, failed: list[dict]) -> dict:
    """How a file was read: from SOURCE, by a worker in which rack, after which FAILED sources."""
    return {"url": source["url"], "cache": source["cache"], "cache_rack": source["rack"], "home_cache": route["cache"],
            "rack": route["rack"], "worker_rack": os.environ.get(WORKER_GROUP_ENV) or None, "failover": failed}
