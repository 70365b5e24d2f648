"""The campaign's outcome in a few lines, as the run's end prints it (the Snakefile's ``onsuccess``, in Snakemake's main
process, and the report job's log). Standard library only: the main process pays for every import at the run's end
(``hepvine.products.report``, which held these, brought uproot and coffea's processor: 0.17 s)."""

from __future__ import annotations

import os
from pathlib import Path


def process_age_s() -> float | None:
    """How long this process has run, from the kernel's record of its start (Linux); None elsewhere."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def summary_line(report: dict, where: Path | str, command_s: float | None = None) -> str:
    """The campaign's outcome in a few lines: files, events, bytes, rates, failures, where the products are, and
    with COMMAND_S the whole command's time beside the analysis window (what a physicist's loop waits for)."""
    files = report["files"]
    lines = [
        f"hepvine campaign {where}: {files['ok']}/{files['total']} files ok, {report['events']:,} events, "
        f"{report['bytes_read'] / 1e6:,.1f} MB read in {report['wall_seconds']:.1f} s on {report['cores']} cores",
        f"  {report['event_rate_hz']:,.0f} events/s ({report['event_rate_per_core_hz']:,.0f} per core), "
        f"{report['data_rate_gbps']:.3f} Gbps",
    ]
    if command_s is not None:
        lines.append(
            f"  this command: {command_s:.1f} s in all; the analysis window (first file started to last "
            f"ended, over the campaign's runs): {report['wall_seconds']:.1f} s"
        )
    if "cache" in report:
        c = report["cache"]
        ratio = "n/a" if c["hit_ratio"] is None else f"{c['hit_ratio']:.3f}"
        origin = "n/a" if c["bytes_from_origin"] is None else f"{c['bytes_from_origin'] / 1e6:,.1f}"
        racked = c["same_rack_bytes"] + c["cross_rack_bytes"]
        lines.append(
            f"  caches: hit ratio {ratio}, {origin} MB from the origin, {c['cross_rack_bytes'] / 1e6:,.1f} of "
            f"{racked / 1e6:,.1f} MB read from a cache in another rack, {len(c['failovers'])} file(s) "
            "failed over"
        )
    accounting = report["accounting"]
    for what in ("missing", "duplicated", "unexpected"):
        if accounting[what]:
            lines.append(
                f"  ACCOUNTING: {len(accounting[what])} file(s) {what} in the records "
                f"(first: {accounting[what][0]}) — report.json: accounting"
            )
    for failure in report["failed_files"][:5]:
        cause = " ".join(failure["error"].split())  # one line: a cause may quote uproot's lines
        lines.append(f"  FAILED ({failure['class']}) {failure['path']}: {cause}")
    if len(report["failed_files"]) > 5:
        lines.append(f"  ... and {len(report['failed_files']) - 5} more failed files (report.json: failed_files)")
    reran = report.get("run_again_with_every_field") or []  # (a report of an older hepvine has none)
    if reran:
        why = " ".join(reran[0]["why"].split())
        lines.append(
            f"  {len(reran)} file(s) ran again with every field, their analysis having used a field the cut of "
            f"columns: auto left out (first: {reran[0]['path']}: {why}); set config columns: all to make every field "
            "from the start (report.json: run_again_with_every_field)"
        )
    versions = report.get("analysis_versions") or {}  # (a report of an older hepvine has none)
    if len(versions) > 1:
        counts = ", ".join(f"{digest}: {n} file(s)" for digest, n in versions.items())
        lines.append(
            f"  ANALYSIS CHANGED while the campaign ran: its files ran {len(versions)} versions of the analysis "
            f"({counts}; report.json: analysis_versions, and inputs[].analysis); touch its file and run the same "
            "command again to analyse every file with the current version"
        )
    transient = sum(f["class"] == "transient" for f in report["failed_files"])
    permanent = len(report["failed_files"]) - transient
    lines.append(
        f"  products: {where}/output.coffea, {where}/histograms.root, {where}/plots/, {where}/report.json, "
        f"{where}/summary.html, {where}/failures.tsv" + ("" if report["complete"] else " — INCOMPLETE")
    )
    lines.append("  all in one page: the same command with --report report.html")
    if transient:
        lines.append(f"  {transient} transient failure(s): run the same command again to retry them")
    if permanent:
        lines.append(
            f"  {permanent} permanent failure(s): report.json failed_files[] says what to fix; then run the same "
            "command again (it reruns the jobs of the files whose source or spec entry changed)"
        )
    return "\n".join(lines)
