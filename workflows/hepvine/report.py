"""The campaign's products from the merged result: ``histograms.root`` (one TH1 per region, process and variation,
``<region>_<process>_<variation>``) and ``report.json`` (completeness, failed files with their causes, events, bytes,
rates, one record per input file). Printing a short summary is the last thing a campaign does.

Each failed file's retry counter in ``retries.json`` goes up by one; the workflow passes the counter to the file's
analysis as a parameter, so running the campaign again (Snakemake reruns jobs whose parameters changed) retries
exactly the files that failed, and what depends on them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import uproot

from hepvine import analysis, cachestats
from hepvine import site as hv_site
from hepvine.merge import load


def histograms(h, path: Path) -> list[str]:
    names = []
    tmp = path.with_name(path.name + ".partial")
    with uproot.recreate(tmp) as f:
        if h is not None:
            for region in analysis.REGIONS:
                for process in h.axes["process"]:
                    for variation in analysis.VARIATIONS:
                        name = f"{region}_{process}_{variation}"
                        f[name] = h[{"region": region, "process": process, "variation": variation}]
                        names.append(name)
    tmp.replace(path)
    return names


def peak_concurrency(records: list[dict]) -> int:
    """The most file tasks that ran at once: the cores the campaign's analysis used (one per task)."""
    edges = sorted([(r["start"], 1) for r in records] + [(r["end"], -1) for r in records],
                   key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return max(peak, 1)


def summarise(records: list[dict]) -> dict:
    ok = [r for r in records if not r["error"]]
    failed = [r for r in records if r["error"]]
    events = sum(r["events"] for r in ok)
    nbytes = sum(r["bytes_read"] for r in ok)
    wall = (max(r["end"] for r in records) - min(r["start"] for r in records)) if records else 0.0
    cores = peak_concurrency(records)
    return {
        "complete": not failed,
        "files": {"total": len(records), "ok": len(ok), "failed": len(failed)},
        "failed_files": [{"path": r["path"], "error": r["error"]} for r in failed],
        "events": events,
        "bytes_read": nbytes,
        "wall_seconds": round(wall, 3),
        "cores": cores,
        "event_rate_hz": round(events / wall, 1) if wall else 0.0,
        "event_rate_per_core_hz": round(events / wall / cores, 1) if wall else 0.0,
        "data_rate_gbps": round(nbytes * 8 / wall / 1e9, 4) if wall else 0.0,
        "inputs": sorted(records, key=lambda r: r["name"]),
    }


def cache_section(records: list[dict], stats_start: dict, stats_end: dict, rack_cores: dict[str, int]) -> dict:
    """What the campaign's reads did at the caches: bytes each cache served and fetched from the origin, the hit
    ratio, bytes read across racks, how busy each rack's workers were, and the files that had to fail over.

    ``hit_ratio`` is 1 - (bytes the caches fetched from the origin) / (bytes read through the caches): a cache fetches
    whole blocks, so a cold read can fetch more than it serves (ratio 0, never below); a warm one fetches nothing.
    """
    fetches = [r["fetch"] for r in records if r.get("fetch") and not r["fetch"].get("error")]
    remote = [f for f in fetches if f["url"].startswith("root://")]
    direct = sum(f["bytes"] for f in remote if f["cache"] is None)
    through_caches = sum(f["bytes"] for f in remote if f["cache"])
    from_origin = cachestats.fetched(stats_start, stats_end)
    measured = all(v is not None for v in from_origin.values())
    fetched_total = sum(v for v in from_origin.values() if v is not None)
    known = [f for f in remote if f["cache"] and f["worker_rack"]]
    # Busy: the seconds of each file's tasks (recompression, when it ran, and analysis) on each rack's workers.
    spans = [(r.get("analysis_worker_rack"), r["start"], r["end"]) for r in records]
    spans += [(f["worker_rack"], f["start"], f["end"]) for f in fetches if "start" in f]
    wall = (max(end for _, _, end in spans) - min(start for _, start, _ in spans)) if spans else 0.0
    busy = {}
    for rack, cores in sorted(rack_cores.items()):
        seconds = sum(end - start for where, start, end in spans if where == rack)
        busy[rack] = round(seconds / (wall * cores), 3) if wall and cores else 0.0
    return {
        "hit_ratio": (round(max(0.0, 1 - fetched_total / through_caches), 4)
                      if measured and through_caches else None),
        "bytes_read_through_caches": through_caches,
        "bytes_from_origin": fetched_total + direct if measured else None,
        "bytes_read_directly_from_origin": direct,
        "same_rack_bytes": sum(f["bytes"] for f in known if f["cache_rack"] == f["worker_rack"]),
        "cross_rack_bytes": sum(f["bytes"] for f in known if f["cache_rack"] != f["worker_rack"]),
        "unknown_rack_bytes": sum(f["bytes"] for f in remote if f["cache"] and not f["worker_rack"]),
        "per_cache": {name: {"served_bytes": sum(f["bytes"] for f in remote if f["cache"] == name),
                             "fetched_from_origin_bytes": from_origin[name]} for name in sorted(from_origin)},
        "rack_busy_fraction": busy,
        "failovers": [{"path": r["path"], "served_by": r["fetch"]["cache"] or "origin",
                       "failed": [f"{f['cache'] or 'origin'}: {f['error']}" for f in r["fetch"]["failover"]]}
                      for r in records if r.get("fetch") and r["fetch"].get("failover")],
    }


def summary_line(report: dict, where: Path | str) -> str:
    """The campaign's outcome in a few lines: files, events, bytes, rates, failures, and where the products are."""
    files = report["files"]
    lines = [f"hepvine campaign {where}: {files['ok']}/{files['total']} files ok, {report['events']:,} events, "
             f"{report['bytes_read'] / 1e6:,.1f} MB read in {report['wall_seconds']:.1f} s on {report['cores']} cores",
             f"  {report['event_rate_hz']:,.0f} events/s ({report['event_rate_per_core_hz']:,.0f} per core), "
             f"{report['data_rate_gbps']:.3f} Gbps"]
    if "cache" in report:
        c = report["cache"]
        ratio = "n/a" if c["hit_ratio"] is None else f"{c['hit_ratio']:.3f}"
        origin = "n/a" if c["bytes_from_origin"] is None else f"{c['bytes_from_origin'] / 1e6:,.1f}"
        racked = c["same_rack_bytes"] + c["cross_rack_bytes"]
        lines.append(f"  caches: hit ratio {ratio}, {origin} MB from the origin, {c['cross_rack_bytes'] / 1e6:,.1f} of "
                     f"{racked / 1e6:,.1f} MB read from a cache in another rack, {len(c['failovers'])} file(s) "
                     "failed over")
    for failure in report["failed_files"][:5]:
        lines.append(f"  FAILED {failure['path']}: {failure['error']}")
    if len(report["failed_files"]) > 5:
        lines.append(f"  ... and {len(report['failed_files']) - 5} more failed files (report.json: failed_files)")
    lines.append(f"  products: {where}/histograms.root, {where}/plots/, {where}/report.json"
                 + ("" if report["complete"] else " — INCOMPLETE: run the same command again to retry the failed files"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--merged", required=True, type=Path)
    parser.add_argument("--histograms", required=True, type=Path)
    parser.add_argument("--report", required=True, type=Path)
    parser.add_argument("--previous-retries", default="{}", help="the counters so far, as JSON")
    parser.add_argument("--retries", required=True, type=Path, help="where to write the updated counters (JSON)")
    parser.add_argument("--site", help="the site config; with --cache-stats, the report gets a cache section")
    parser.add_argument("--cache-stats", type=Path, help="the caches' counters at the run's start and end (JSON "
                        "{start, end} of hepvine.cachestats snapshots)")
    args = parser.parse_args(argv)
    merged = load(args.merged)
    histograms(merged["hist"], args.histograms)
    report = summarise(merged["records"])
    if args.site and args.cache_stats:
        stats = json.loads(args.cache_stats.read_text())
        report["cache"] = cache_section(merged["records"], stats["start"], stats["end"],
                                        hv_site.load(args.site).rack_cores())
    args.report.write_text(json.dumps(report, indent=2) + "\n")
    for failure in report["failed_files"]:
        print(f"FAILED {failure['path']}: {failure['error']}", file=sys.stderr)
    retries = json.loads(args.previous_retries)
    for record in merged["records"]:
        if record["error"]:
            retries[record["name"]] = retries.get(record["name"], 0) + 1
    args.retries.write_text(json.dumps(retries, indent=2, sort_keys=True) + "\n")
    print(summary_line(report, args.report.parent), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
