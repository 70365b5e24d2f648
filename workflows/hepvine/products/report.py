"""The campaign's last step: the merge tree's root (its results added up, ``hepvine.jobs.merge``) and the products
from it: ``output.coffea``, ``histograms.root`` and ``report.json``, and for ``snakemake --report`` the same outcome
as ``summary.html`` (throughput figures, caches, accounting, failed files) and ``failures.tsv`` (one row per failed
file: identity, path, rule, output, class, kind, cause, fix).

The analysis's products (``hepvine.products.output``): the merged output goes through the processor's ``postprocess``
once, as coffea's Runner does, into ``output.coffea``, and its histograms into ``histograms.root``. ``report.json``
reconciles the records with the dataset: ``complete`` is true only if every file has exactly one record, none
failed and all ran one version of the analysis (``analysis_versions``: ``hepvine.model.sources.version``); it lists
failed files with their failure class, cause, fix and output, and the events, bytes and rates, and which histograms
went to ``histograms.root``. The report is checked before it is written: the events the merged
result counts must equal the sum of the ok records. Its ``provenance`` says what made the products
(``hepvine.products.provenance``: software, checkout, command line, profile, the analysis and its SHA-256,
checksums, times). With ``--plots`` it draws the campaign's plots too (``hepvine.products.plots``), while it writes
the rest: one process less to start and to load the output.

Retries (``hepvine.products.retries``): transient failures are retried by running the same command again; permanent
ones once their cause is fixed (the file replaced or restored, its spec entry or the analysis changed): the same
command then reruns their jobs, and the report says what to fix.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
import time
from collections import Counter
from contextlib import nullcontext
from pathlib import Path

from hepvine.jobs.merge import OldResult, load, merge
from hepvine.model import atomic
from hepvine.products import cachestats, output, plots, provenance
from hepvine.products.summary import summary_line
from hepvine.routing import index as hv_index
from hepvine.work import processor


class ReportError(RuntimeError):
    """The merged results disagree with themselves (a bug, never a file's problem): no report is written."""


def reconcile(records: list[dict], expected: list[tuple[str, str, str]]) -> dict:
    """How the records match the spec's files: missing, duplicated and unexpected identities."""
    counts = Counter(r["fid"] for r in records)
    want = {fid for fid, _, _ in expected}
    return {
        "expected": len(want),
        "records": len(records),
        "missing": sorted(want - set(counts)),
        "duplicated": sorted(fid for fid, n in counts.items() if n > 1),
        "unexpected": sorted(set(counts) - want),
    }


def peak_concurrency(records: list[dict]) -> int:
    """The most file tasks that ran at once: the cores the campaign's analysis used (one per task)."""
    edges = sorted([(r["start"], 1) for r in records] + [(r["end"], -1) for r in records], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return max(peak, 1)


def summarise(records: list[dict], expected: list[tuple[str, str, str]], out: str = ".") -> dict:
    ok = [r for r in records if r["failure"] is None]
    failed = [r for r in records if r["failure"] is not None]
    accounting = reconcile(records, expected)
    exact = not (accounting["missing"] or accounting["duplicated"] or accounting["unexpected"])
    events = sum(r["events"] for r in ok)
    nbytes = sum(r["bytes_read"] for r in ok)
    wall = (max(r["end"] for r in records) - min(r["start"] for r in records)) if records else 0.0
    cores = peak_concurrency(records)
    # The versions of the analysis the files' jobs ran (records of an older hepvine have none): more than one, and the
    # output mixes them.
    versions = Counter(r["analysis"] for r in records if r.get("analysis"))
    return {
        "complete": exact and not failed and len(versions) <= 1,
        "generated": time.time(),
        "files": {"total": len(expected), "ok": len(ok), "failed": len(failed)},
        "accounting": accounting,
        "failed_files": [
            {
                "fid": r["fid"],
                "path": r["path"],
                "class": r["failure"]["failure_class"],
                "kind": r["failure"]["kind"],
                "error": r["failure"]["cause"],
                "fix": r["failure"]["fix"],
                "output": f"{out}/files/{r['batch']}.pkl",
            }
            for r in failed
        ],
        # With config columns: auto, the files whose cut fell short and that ran again with every field (records of an
        # older hepvine have no "rerun").
        "run_again_with_every_field": [
            {"fid": r["fid"], "path": r["path"], "why": r["rerun"]} for r in records if r.get("rerun")
        ],
        "analysis_versions": dict(sorted(versions.items())),
        "events": events,
        "bytes_read": nbytes,
        "wall_seconds": round(wall, 3),
        "cores": cores,
        "event_rate_hz": round(events / wall, 1) if wall else 0.0,
        "event_rate_per_core_hz": round(events / wall / cores, 1) if wall else 0.0,
        "data_rate_gbps": round(nbytes * 8 / wall / 1e9, 4) if wall else 0.0,
        "inputs": sorted(records, key=lambda r: r["fid"]),
    }


def cache_section(records: list[dict], stats_start: dict, stats_end: dict, rack_cores: dict[str, int]) -> dict:
    """What the campaign's reads did at the caches: bytes each cache served and fetched from the origin, the hit
    ratio, bytes read across racks, how busy each rack's workers were, and the files that had to fail over.

    ``hit_ratio`` is 1 - (bytes the caches fetched from the origin) / (bytes read through the caches): a cache fetches
    whole blocks, so a cold read can fetch more than it serves (ratio 0, never below); a warm one fetches nothing.
    """
    fetches = [r["fetch"] for r in records if r.get("fetch") and r["failure"] is None]
    remote = [f for f in fetches if f["url"].startswith("root://")]
    direct = sum(f["bytes"] for f in remote if f["cache"] is None)
    through_caches = sum(f["bytes"] for f in remote if f["cache"])
    from_origin = cachestats.fetched(stats_start, stats_end)
    measured = all(v is not None for v in from_origin.values())
    fetched_total = sum(v for v in from_origin.values() if v is not None)
    known = [f for f in remote if f["cache"] and f["worker_rack"]]
    # Busy: the seconds each file's work (recompression, when it ran, and analysis: one job) took on each rack.
    spans = [(r.get("analysis_worker_rack"), r["start"], r["end"]) for r in records]
    wall = (max(end for _, _, end in spans) - min(start for _, start, _ in spans)) if spans else 0.0
    busy = {}
    for rack, cores in sorted(rack_cores.items()):
        seconds = sum(end - start for where, start, end in spans if where == rack)
        busy[rack] = round(seconds / (wall * cores), 3) if wall and cores else 0.0
    return {
        "hit_ratio": (round(max(0.0, 1 - fetched_total / through_caches), 4) if measured and through_caches else None),
        "bytes_read_through_caches": through_caches,
        "bytes_from_origin": fetched_total + direct if measured else None,
        "bytes_read_directly_from_origin": direct,
        "same_rack_bytes": sum(f["bytes"] for f in known if f["cache_rack"] == f["worker_rack"]),
        "cross_rack_bytes": sum(f["bytes"] for f in known if f["cache_rack"] != f["worker_rack"]),
        "unknown_rack_bytes": sum(f["bytes"] for f in remote if f["cache"] and not f["worker_rack"]),
        "per_cache": {
            name: {
                "served_bytes": sum(f["bytes"] for f in remote if f["cache"] == name),
                "fetched_from_origin_bytes": from_origin[name],
            }
            for name in sorted(from_origin)
        },
        "rack_busy_fraction": busy,
        "failovers": [
            {
                "path": r["path"],
                "served_by": r["fetch"]["cache"] or "origin",
                "failed": [f"{f['cache'] or 'origin'}: {f['error']}" for f in r["fetch"]["failover"]],
            }
            for r in records
            if r.get("fetch") and r["fetch"].get("failover")
        ],
    }


# The workflow's rule whose job records each file's outcome (its output: files/<batch>.pkl).
FILE_RULE = "analyse"
FAILURE_COLUMNS = ("fid", "path", "rule", "output", "class", "kind", "cause", "fix")
HTML_FAILURE_ROWS = 1000  # summary.html shows this many failed files; failures.tsv has them all


def failure_rows(report: dict) -> list[tuple[str, ...]]:
    """One row per failed file, in FAILURE_COLUMNS' order."""
    return [
        (f["fid"], f["path"], FILE_RULE, f["output"], f["class"], f["kind"], f["error"], f["fix"])
        for f in report["failed_files"]
    ]


def failures_tsv(report: dict) -> str:
    """The failed-file table as tab-separated text: a header, then one row per failed file (tabs and line breaks
    inside a cause become spaces)."""
    lines = ["\t".join(FAILURE_COLUMNS)]
    lines += ["\t".join(" ".join(str(cell).split()) for cell in row) for row in failure_rows(report)]
    return "\n".join(lines) + "\n"


def _table(rows: list[tuple], header: tuple | None = None) -> str:
    head = "<tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def summary_html(report: dict, where: Path | str) -> str:
    """The campaign's outcome as a small HTML page (for ``snakemake --report``): the throughput figures, the caches,
    the accounting and the failed files (the first HTML_FAILURE_ROWS; failures.tsv lists them all)."""
    files = report["files"]
    transient = sum(f["class"] == "transient" for f in report["failed_files"])
    figures = [
        ("outcome", "complete" if report["complete"] else "INCOMPLETE"),
        ("files ok", f"{files['ok']:,} of {files['total']:,}"),
        ("files failed", f"{files['failed']:,} ({transient:,} transient, {files['failed'] - transient:,} permanent)"),
        ("files run again with every field", f"{len(report.get('run_again_with_every_field') or []):,}"),
        (
            "versions of the analysis the files ran",
            ", ".join(f"{v}: {n:,}" for v, n in (report.get("analysis_versions") or {}).items()) or "n/a",
        ),
        ("events analysed", f"{report['events']:,}"),
        ("bytes read", f"{report['bytes_read'] / 1e6:,.1f} MB"),
        ("wall time", f"{report['wall_seconds']:,.1f} s"),
        ("cores (most file tasks at once)", f"{report['cores']:,}"),
        ("event rate", f"{report['event_rate_hz']:,.0f} Hz ({report['event_rate_per_core_hz']:,.0f} Hz per core)"),
        ("data rate", f"{report['data_rate_gbps']:.3f} Gbps"),
    ]
    if "cache" in report:
        c = report["cache"]
        figures += [
            ("cache hit ratio", "n/a" if c["hit_ratio"] is None else f"{c['hit_ratio']:.3f}"),
            (
                "bytes from the origin",
                "n/a" if c["bytes_from_origin"] is None else f"{c['bytes_from_origin'] / 1e6:,.1f} MB",
            ),
            ("read from a cache in another rack", f"{c['cross_rack_bytes'] / 1e6:,.1f} MB"),
            ("files that failed over", f"{len(c['failovers']):,}"),
        ]
    figures += [
        (
            f"accounting: {what}",
            f"{len(report['accounting'][what]):,} file(s)"
            + (f", first {report['accounting'][what][0]}" if report["accounting"][what] else ""),
        )
        for what in ("missing", "duplicated", "unexpected")
    ]
    rows = failure_rows(report)
    shown = (
        f"<p>{len(rows):,} failed file(s); the first {HTML_FAILURE_ROWS:,} are shown, failures.tsv lists them all.</p>"
        if len(rows) > HTML_FAILURE_ROWS
        else ""
    )
    failures = _table(rows[:HTML_FAILURE_ROWS], FAILURE_COLUMNS) + shown if rows else "<p>No file failed.</p>"
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>hepvine campaign '
        f"{html.escape(str(where))}</title><style>table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;"
        "padding:2px 6px;text-align:left;vertical-align:top}</style></head><body>\n"
        f"<h2>hepvine campaign {html.escape(str(where))}</h2>\n{_table(figures)}\n"
        f"<h3>Failed files</h3>\n{failures}\n"
        "<p>Transient failures are retried by running the same command again; a permanent one too, once its fix is "
        "done (the file replaced or restored, its spec entry changed). report.json has every file's record.</p>\n"
        "</body></html>\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--results",
        required=True,
        nargs="+",
        type=Path,
        help="the batch or merged results the merge tree's root adds up (read one at a time)",
    )
    parser.add_argument("--expected", required=True, type=Path, help="the index's expected.json: every file")
    parser.add_argument(
        "--analysis",
        required=True,
        help="<file.py>:<Name> or <module>:<Name>: its postprocess runs once on the merged output",
    )
    parser.add_argument("--analysis-args", default="{}", help="a JSON mapping: the processor's constructor arguments")
    parser.add_argument("--output", required=True, type=Path, help="output.coffea (coffea.util.save)")
    parser.add_argument("--histograms", required=True, type=Path)
    parser.add_argument("--report", required=True, type=Path)
    parser.add_argument("--summary", required=True, type=Path, help="summary.html: the figures and failed files")
    parser.add_argument("--failures", required=True, type=Path, help="failures.tsv: one row per failed file")
    parser.add_argument(
        "--site",
        type=Path,
        help="the index's site.json (site name, cores per rack); with --cache-stats, the report gets a cache section",
    )
    parser.add_argument(
        "--cache-stats",
        type=Path,
        help="the caches' counters at the run's start and end (JSON "
        "{start, end} of hepvine.products.cachestats snapshots)",
    )
    parser.add_argument(
        "--plots", type=Path, help="draw the campaign's plots into this directory (hepvine.products.plots)"
    )
    parser.add_argument(
        "--plot-histograms", action="store_true", help="a default plot of each 1-D and 2-D histogram of the output too"
    )
    parser.add_argument(
        "--processes", type=int, default=1, help="draw the plots in this many processes (the job's threads)"
    )
    parser.add_argument(
        "--run",
        type=Path,
        help="the index's run.json (what the main Snakemake process recorded: "
        "command line, profile, software, checksums); without it the provenance holds only what "
        "this process knows",
    )
    args = parser.parse_args(argv)
    try:  # first: the merged output may hold instances of the analysis's own classes
        analysis = processor.load(args.analysis, json.loads(args.analysis_args))
    except processor.AnalysisSpecError as e:
        print(f"hepvine.products.report: {e}", file=sys.stderr)
        return 2
    try:
        merged = merge(load(p) for p in args.results)
    except OldResult as e:
        print(f"hepvine.products.report: {e}", file=sys.stderr)
        return 1
    expected = hv_index.expected(args.expected)
    report = summarise(merged["records"], expected, str(args.report.parent))
    analysed = sum(merged["events"].values())
    if analysed != report["events"]:
        raise ReportError(
            f"{args.report.parent}: the merged results count {analysed} events, the ok records "
            f"{report['events']}: the merge added results' events and records apart (a result lost or doubled "
            "shows in the accounting instead); this is a bug in hepvine, please report it"
        )
    result = merged["output"] if merged["output"] is None else analysis.postprocess(merged["output"])
    output.save(result, args.output)
    named = output.histograms(result) if args.plot_histograms else []
    drawn = plots.drawing(named, merged["records"], args.plots, args.processes) if args.plots else nullcontext()
    with drawn:  # (the plots are drawn while the rest is written)
        report["histograms"] = output.write_root(result, args.histograms)
        report["events_per_dataset"] = dict(sorted(merged["events"].items()))
        if args.site and args.cache_stats:
            stats = json.loads(args.cache_stats.read_text())
            report["cache"] = cache_section(
                merged["records"], stats["start"], stats["end"], json.loads(args.site.read_text())["rack_cores"]
            )
        report["provenance"] = provenance.section(provenance.load_run(args.run), merged["records"])
        atomic.write_json(args.report, report)
        atomic.write_text(args.summary, summary_html(report, args.report.parent))
        atomic.write_text(args.failures, failures_tsv(report))
    for failure in report["failed_files"]:
        print(f"FAILED ({failure['class']}) {failure['path']}: {failure['error']}", file=sys.stderr)
    print(summary_line(report, args.report.parent), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
