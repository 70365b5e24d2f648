"""The campaign's per-job index: the spec's files cut into batches (one job each) and, per batch, a small JSON shard
holding exactly what that job needs — each file's entry and route, and the XRootD client settings.

The main Snakemake process validates the spec and writes the index once per run (``write``; a shard is rewritten
only when its content changes, so Snakemake's mtime checks keep the finished jobs). A job reads its own shard and
nothing else (``read``): what a job does before its real work does not grow with the dataset.

A batch holds up to ``files_per_job`` files of one process and variation with the same home cache (so the whole job
prefers one rack). Its id is ``<process>/<variation>/<home>/<thousands>/<n>`` — also the path of its outputs, so no
output directory holds more than 1,000 of them. ``expected.json`` lists every file's identity, path and batch, for
the report's reconciliation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from hepvine.model import atomic
from hepvine.model.dataset import FileTask

# The batch wildcard: process, variation, home, then the batch number in two levels of three digits (no braces:
# Snakemake reads them as wildcards).
BATCH_PATTERN = r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[0-9][0-9][0-9]+/[0-9][0-9][0-9]"
UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
NO_CACHE = "direct"  # the home of files read where they are (no site, a local path, or access: direct)


@dataclass(frozen=True)
class Batch:
    """One job's files, all of one process and variation with the same home cache (and so the same rack)."""

    id: str
    rack: str | None
    files: tuple[FileTask, ...]
    routes: tuple[dict, ...]  # each file's route, computed once (routing 219,000 files costs ~20 s)


def batch_id(process: str, variation: str, home: str, number: int) -> str:
    return f"{process}/{variation}/{UNSAFE.sub('_', home)}/{number // 1000:03d}/{number % 1000:03d}"


def plan(tasks: Iterable[FileTask], files_per_job: int, route: Callable[..., dict]) -> list[Batch]:
    """The batches of TASKS: in spec order, grouped by process, variation and home cache (ROUTE(path, replicas) gives
    a file's route), up to FILES_PER_JOB each."""
    groups: dict[tuple[str, str, str], tuple[str | None, list[FileTask], list[dict]]] = {}
    for task in tasks:
        r = route(task.path, task.replicas)
        key = (task.process, task.variation, r["cache"] or NO_CACHE)
        group = groups.setdefault(key, (r["rack"], [], []))
        group[1].append(task)
        group[2].append(r)
    batches = []
    for (process, variation, home), (rack, files, routes) in groups.items():
        for number, first in enumerate(range(0, len(files), files_per_job)):
            last = first + files_per_job
            batches.append(
                Batch(
                    batch_id(process, variation, home, number),
                    rack,
                    tuple(files[first:last]),
                    tuple(routes[first:last]),
                )
            )
    return batches


def shard(batch: Batch, xrootd_client: dict) -> dict:
    """What BATCH's job needs: each file's entry and route, and the XRootD client settings."""
    return {
        "batch": batch.id,
        "rack": batch.rack,
        "xrootd_client": xrootd_client,
        "files": [
            {
                "fid": t.fid,
                "path": t.path,
                "process": t.process,
                "variation": t.variation,
                "index": t.index,
                "nevts": t.nevts,
                "nevts_total": t.nevts_total,
                "xsec": t.xsec,
                "era": t.era,
                "bytes": t.bytes,
                "dataset": t.dataset,
                "treename": t.treename,
                "metadata": t.metadata,
                "uuid": t.uuid,
                "steps": t.steps,
                "route": r,
            }
            for t, r in zip(batch.files, batch.routes)
        ],
    }


def shard_path(directory: Path | str, batch: str) -> Path:
    return Path(directory) / f"{batch}.json"


def write(directory: Path | str, batches: list[Batch], xrootd_client: dict) -> int:
    """Write every batch's shard and ``expected.json`` under DIRECTORY; returns how many files were (re)written."""
    written = 0
    for batch in batches:
        text = json.dumps(shard(batch, xrootd_client), separators=(",", ":"), sort_keys=True)
        written += atomic.write_if_changed(shard_path(directory, batch.id), text)
    expected = [[t.fid, t.path, b.id] for b in batches for t in b.files]
    written += atomic.write_if_changed(
        Path(directory) / "expected.json", json.dumps({"files": expected}, separators=(",", ":"))
    )
    return written


def read(path: Path | str) -> dict:
    """A batch's shard (see ``shard``)."""
    return json.loads(Path(path).read_text())


def expected(path: Path | str) -> list[tuple[str, str, str]]:
    """(fid, path, batch) of every file of the campaign, from ``expected.json``."""
    return [tuple(row) for row in json.loads(Path(path).read_text())["files"]]


def task(entry: dict) -> FileTask:
    """The FileTask of one entry of a shard."""
    return FileTask(
        fid=entry["fid"],
        process=entry["process"],
        variation=entry["variation"],
        index=entry["index"],
        path=entry["path"],
        nevts=entry["nevts"],
        nevts_total=entry["nevts_total"],
        xsec=entry["xsec"],
        era=entry.get("era"),
        bytes=entry.get("bytes"),
        dataset=entry["dataset"],
        treename=entry["treename"],
        metadata=entry["metadata"],
        uuid=entry["uuid"],
        steps=entry["steps"],
    )


def merge_tree(leaves: list[str], fan_in: int, directory: str) -> tuple[dict[str, list[str]], list[str]]:
    """The merge tree over LEAVES: ({node output: its inputs} for the inner nodes, named
    ``DIRECTORY/<level>/<thousands>/<n>.pkl`` (no directory holds more than 1,000 nodes: 219,000 files a job each
    and a fan-in of 16 make 13,688 nodes on the first level), and the root's inputs (at most FAN_IN))."""
    nodes: dict[str, list[str]] = {}
    below, level = list(leaves), 1
    while len(below) > fan_in:
        above = []
        for i, first in enumerate(range(0, len(below), fan_in)):
            name = f"{directory}/{level}/{i // 1000:03d}/{i % 1000:03d}.pkl"
            nodes[name] = below[first : first + fan_in]
            above.append(name)
        below, level = above, level + 1
    return nodes, below


def write_merge_tree(directory: Path | str, nodes: dict[str, list[str]], root: list[str], out: str) -> int:
    """One JSON file per merge node under DIRECTORY (``<level>/<thousands>/<n>.json``, listing its inputs) and
    ``root.json``, so that a merge job reads only its own node; returns how many were (re)written."""
    written = 0
    for name, inputs in nodes.items():
        rel = Path(name).relative_to(out).with_suffix(".json")
        written += atomic.write_if_changed(Path(directory) / rel, json.dumps(inputs))
    return written + atomic.write_if_changed(Path(directory) / "root.json", json.dumps(root))


def write_site(directory: Path | str, name: str, rack_cores: dict[str, int]) -> bool:
    """``site.json``: what the report needs of the site config (its name, the cores per rack)."""
    return atomic.write_if_changed(
        Path(directory) / "site.json", json.dumps({"site": name, "rack_cores": rack_cores}, sort_keys=True)
    )
