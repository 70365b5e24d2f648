"""The XCaches' own byte counters, read before and after a campaign, and what the campaign's reads did to them.

Each cache answers ``query stats`` (XRootD's ``kXR_query`` with ``a``: all statistics) with an XML document whose
``<stats id="cache" type="pfc">`` part counts, since the cache started, the bytes it served from what it held
(``rd/hits``), the bytes it had to fetch first (``rd/miss``), what it read from the origin (``rd/in``, plus
``prerd/in`` for prefetching) and what it sent to clients (``rd/out``). The difference of two snapshots is the
campaign's share — if nothing else read through the same caches meanwhile.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

from hepvine import site as hv_site

COUNTERS = {"served": "rd/out", "hits": "rd/hits", "misses": "rd/miss", "from_origin": "rd/in",
            "prefetched_from_origin": "prerd/in"}


def parse(xml: str) -> dict[str, int]:
    """The cache counters of one ``query stats`` answer."""
    cache = ET.fromstring(xml).find("stats[@id='cache']")
    if cache is None:
        raise ValueError("the server's statistics have no cache part: is it an XCache (pss.cachelib libXrdPfc)?")
    return {name: int(cache.findtext(path, "0")) for name, path in COUNTERS.items()}


def query(url: str) -> str:
    """The statistics document of the XRootD server at URL."""
    from XRootD import client
    from XRootD.client.flags import QueryCode

    status, answer = client.FileSystem(url).query(QueryCode.STATS, "a", timeout=10)
    if not status.ok:
        raise OSError(f"{url}: query stats failed: {status.message}")
    return answer.decode(errors="replace").rstrip("\0")


def snapshot(site: hv_site.Site) -> dict:
    """Every cache's counters now; a cache that does not answer is recorded as down, with the cause."""
    caches = {}
    for cache in site.caches:
        try:
            caches[cache["name"]] = parse(query(cache["url"]))
        except (OSError, ValueError, ET.ParseError) as e:
            caches[cache["name"]] = {"down": f"{type(e).__name__}: {e}"}
    return {"time": time.time(), "caches": caches}


def difference(start: dict, end: dict) -> dict[str, dict]:
    """Per cache, what each counter grew by between the snapshots START and END (caches down in either: None)."""
    out = {}
    for name, after in end["caches"].items():
        before = start["caches"].get(name, {})
        if "down" in after or "down" in before or not before:
            out[name] = None
        else:
            out[name] = {key: after[key] - before[key] for key in COUNTERS}
    return out
