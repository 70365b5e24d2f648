"""Retries across runs: ``retries.json`` counts each file's failures by class and, for a file that failed
permanently, what identified its source then (``source_identity``: size and modification time, or that it was
missing). When a run ends the workflow adds the report's failures (``update``); when it plans, a batch's job gets two
parameters from it: its count of transient failures (``transient_counts``), and the new identity of each of its
permanently failed files whose source has changed since it failed (``fixed_sources``: a few stats, only of the
failed files). So running the same command again reruns exactly the batches that had a transient failure or whose
broken file was replaced or restored (Snakemake reruns jobs whose parameters changed), and never the others.
A run that ends in an error before its report has its failures counted from the batch results it wrote
(``update_after_error``), so the same command again retries them too.
Imported at parse time: JSON, os and (for a ``root://`` source) XRootD's client only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from hepvine.model import atomic
from hepvine.routing.site import ROOT_URL


def source_identity(path: str) -> str:
    """What identifies the file at PATH now: ``<size>:<mtime ns>``, ``missing``, or ``unknown`` when it cannot be
    asked (a server that does not answer)."""
    url = ROOT_URL.match(path)
    if url is None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return "missing"
        except OSError:
            return "unknown"
        return f"{st.st_size}:{st.st_mtime_ns}"
    try:
        from XRootD import client
    except ImportError:
        return "unknown"
    status, info = client.FileSystem(url.group(1)).stat(url.group(2), timeout=10)
    if not status.ok:
        return "missing" if status.errno == 3011 else "unknown"  # kXR_NotFound
    return f"{info.size}:{info.modtime}"


def _count(files: dict, failures: list[tuple[str, str, str]]) -> None:
    """Add FAILURES ((fid, class, path) each) to FILES, the retries file's counts; for a file's first permanent
    failure, keep what identified its source."""
    for fid, failure_class, source in failures:
        counts = files.setdefault(fid, {"transient": 0, "permanent": 0})
        counts[failure_class] += 1
        if failure_class == "permanent" and "failed_source" not in counts:
            counts["path"], counts["failed_source"] = source, source_identity(source)


def update(report: dict, path: Path) -> None:
    """Count each failed file's failures by class in the retries file at PATH, once per report."""
    previous = _previous(path)
    if previous.get("report") == report["generated"]:
        return
    failures = [(f["fid"], f["class"], f["path"]) for f in report["failed_files"]]
    _add(path, previous, failures, report=report["generated"])


def update_after_error(out: Path, started: Path, path: Path) -> tuple[int, list[str]]:
    """After a run of the campaign at OUT (results/<campaign>) that ended in an error: count its failures in the
    retries file at PATH. STARTED is the file the run touched as it began (its modification time, on the results'
    filesystem and by its clock, is the run's start). If the run made its report before the error, the report is
    counted (as ``update`` does, once); else the failures recorded in the batch results it wrote (``files/``, those
    modified since it began; only their records are read). A batch with a transient failure runs again next time,
    so its new result goes into a later count, never this one again; a permanent failure is counted again by a
    later report that holds it (as a report counts it each time). Returns (failures counted, results that could not
    be read, each with why)."""
    if not started.exists():  # the run ended before it planned: it ran no job
        return 0, []
    since_ns = started.stat().st_mtime_ns
    report_file = out / "report.json"
    if report_file.exists() and report_file.stat().st_mtime_ns >= since_ns:
        report = json.loads(report_file.read_text())
        update(report, path)
        return len(report["failed_files"]), []
    from hepvine.jobs.merge import UNREADABLE, read_records

    failures, unreadable = [], []
    results = out / "files"
    for result in results.rglob("*.pkl") if results.is_dir() else ():
        try:
            records = read_records(result)["records"] if result.stat().st_mtime_ns >= since_ns else ()
        except FileNotFoundError:  # renamed away in the instant: not this run's
            continue
        except UNREADABLE as e:
            unreadable.append(f"{result}: {type(e).__name__}: {e}")
            continue
        failures += [(r["fid"], r["failure"]["failure_class"], r["path"]) for r in records if r["failure"] is not None]
    if failures:
        _add(path, _previous(path), failures)
    return len(failures), unreadable


def _previous(path: Path) -> dict:
    """The retries file at PATH as it is ({} if there is none)."""
    return json.loads(path.read_text()) if path.exists() else {}


def _add(path: Path, previous: dict, failures: list[tuple[str, str, str]], **marks) -> None:
    """Write the retries file at PATH: PREVIOUS (what it held) with FAILURES counted and MARKS set (``report``: the
    ``generated`` of the report counted)."""
    files = previous.get("files", {})
    _count(files, failures)
    atomic.write_json(path, {**previous, **marks, "files": files})


def _files(path: Path) -> dict:
    return _previous(path).get("files", {})


def transient_counts(path: Path) -> dict[str, int]:
    """Each file's transient failures so far, from the retries file at PATH (empty if there is none)."""
    return {fid: c["transient"] for fid, c in _files(path).items() if c["transient"]}


def permanent_failures(path: Path) -> dict[str, dict]:
    """The files of the retries file at PATH that failed permanently, with what identified their source then."""
    return {fid: c for fid, c in _files(path).items() if "failed_source" in c}


def fixed_sources(failed: dict[str, dict]) -> dict[str, str]:
    """Each of FAILED (``permanent_failures``) whose source is no longer what it was when it first failed: its
    identity now. (A file given another path in the dataset reruns its job anyway: its shard changes.)"""
    fixed = {}
    for fid, record in failed.items():
        now = source_identity(record["path"])
        if now not in (record["failed_source"], "unknown"):
            fixed[fid] = now
    return fixed
