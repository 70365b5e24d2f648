"""What the caches fetched from the origin during a run, measured on their disks.

An XCache stores what it fetches for a file in a sparse copy under its ``oss.localroot``: the copy's allocated
blocks grow by what the cache had to read from the origin, and not at all when it served bytes it already held.
A snapshot records, for the campaign's files, the bytes allocated in each cache whose disk the site config names
(``caches[].disk``, readable from the machine that runs snakemake — the sandbox); the difference of two snapshots is
what the run fetched. Caches without a ``disk`` are reported as not measured. (XCache 5.8's own counters, from
``query stats``, stay at zero, and its ``pfc-stats/DirStat.json`` holds only the last interval; neither can give a
run's totals.)
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterable

from hepvine.routing import site as hv_site


def stored_bytes(disk: str, lfns: Iterable[str]) -> tuple[int, int]:
    """(bytes allocated, files present) on the cache disk DISK for the logical file names LFNS."""
    total = files = 0
    for lfn in lfns:
        try:
            info = os.stat(Path(disk) / lfn.lstrip("/"))
        except FileNotFoundError:
            continue
        total += info.st_blocks * 512
        files += 1
    return total, files


def snapshot(site: hv_site.Site, lfns: list[str]) -> dict:
    """Per cache, the bytes of the files LFNS that its disk holds now."""
    caches = {}
    for cache in site.caches:
        if not cache.get("disk"):
            caches[cache["name"]] = {"unmeasured": "the site config names no disk for this cache"}
            continue
        stored, files = stored_bytes(cache["disk"], lfns)
        caches[cache["name"]] = {"stored_bytes": stored, "files": files}
    return {"time": time.time(), "caches": caches}


def fetched(start: dict, end: dict) -> dict[str, int | None]:
    """Per cache, the bytes it fetched from the origin between the snapshots START and END (None: not measured)."""
    out = {}
    for name, after in end["caches"].items():
        before = start["caches"].get(name, {})
        measured = "stored_bytes" in after and "stored_bytes" in before
        out[name] = after["stored_bytes"] - before["stored_bytes"] if measured else None
    return out
