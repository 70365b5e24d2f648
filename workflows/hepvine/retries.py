"""Retries across runs: ``retries.json`` counts each file's failures by class. When a run ends the workflow adds
the report's failures (``update``); when it starts, a batch's count of transient failures (``transient_counts``) is a
parameter of its job, so running the same command again reruns exactly the batches that had a transient failure
(Snakemake reruns jobs whose parameters changed), and never the others. Imported at parse time: JSON only.
"""

from __future__ import annotations

import json
from pathlib import Path

from hepvine import atomic


def update(report: dict, path: Path) -> None:
    """Count each failed file's failures by class in the retries file at PATH, once per report."""
    previous = json.loads(path.read_text()) if path.exists() else {}
    if previous.get("report") == report["generated"]:
        return
    files = previous.get("files", {})
    for failure in report["failed_files"]:
        counts = files.setdefault(failure["fid"], {"transient": 0, "permanent": 0})
        counts[failure["class"]] += 1
    atomic.write_json(path, {"report": report["generated"], "files": files})


def transient_counts(path: Path) -> dict[str, int]:
    """Each file's transient failures so far, from the retries file at PATH (empty if there is none)."""
    if not path.exists():
        return {}
    return {fid: c["transient"] for fid, c in json.loads(path.read_text())["files"].items() if c["transient"]}
