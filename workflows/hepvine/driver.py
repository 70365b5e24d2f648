"""One job of a campaign: the files of one batch, each read over its route (home cache first, then its fail-overs),
optionally recompressed first, and analysed — one ``FileRecord`` per file, ok or failed with its class, and the sum
of the histograms of the files that succeeded.

A file's failure never fails or hides its batch-mates: each file is tried on its own and recorded. Only failures of
the file or its access are records (``records.classify``); anything else is a bug in hepvine and fails the job with
its traceback. Output: a pickle ``{"records": [dict, ...], "hist": Hist | None, "events": {"<process>/<variation>":
events}}``, written atomically; recompressed copies go to ``--copies DIR/<index>.root`` with ``manifest.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import time
import traceback
from pathlib import Path

import uproot

from hepvine import analysis, atomic, eras, fetch, index, records
from hepvine.recompress import parse_codec, recompress

# In entries: a size in bytes ("200 MB") fails in uproot 5.7 for root:// files (TypeError in the basket lookup).
STEP_SIZE = 200_000


def histogram(url: str, task, weight: float) -> tuple:
    """(histogram, events, bytes read, era) of the file at URL. Its ``Events`` may be a TTree or an RNTuple (uproot
    reads both; RNTuple fields have the TTree's branch names, e.g. ``Jet_pt``); its era is the spec's (TASK.era)
    or the file's (``hepvine.eras``)."""
    h = analysis.new_histogram()
    events = 0
    with uproot.open(url) as f:
        tree = f["Events"]
        selection = eras.for_file(url, f, tree, task.era)
        for chunk in tree.iterate(selection.branches, step_size=STEP_SIZE, library="ak"):
            analysis.fill(h, chunk, task.process, weight, selection)
            events += int(len(chunk))
        return h, events, int(f.file.source.num_requested_bytes), selection.describe()


def run_file(entry: dict, batch: str, lumi_pb: float, codec: str | None = None, copies: Path | None = None,
             retry: fetch.Retry = fetch.Retry()) -> tuple[records.FileRecord, object]:
    """One file of a batch: (its record, its histogram or None)."""
    task = index.task(entry)
    record = records.FileRecord(fid=task.fid, path=task.path, process=task.process, variation=task.variation,
                                batch=batch, host=socket.gethostname(), start=time.time(),
                                analysis_worker_rack=os.environ.get(fetch.WORKER_GROUP_ENV) or None)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    weight = analysis.event_weight(task.xsec, lumi_pb, task.nevts_total)
    route = entry["route"]
    copy = copies / f"{task.index}.root" if codec else None
    h = None
    try:
        if codec:
            started = time.time()
            (_, source_bytes), record.fetch = fetch.read(
                route, lambda url: recompress(url, copy, parse_codec(codec)), retry)
            seconds = time.time() - started
            record.fetch.update(bytes=source_bytes, start=started, end=time.time())
            copy_bytes = copy.stat().st_size
            record.recompress = {"codec": codec, "source_bytes": source_bytes, "copy_bytes": copy_bytes,
                                 "seconds": round(seconds, 3),
                                 "source_mb_per_s": round(source_bytes / 1e6 / seconds, 2) if seconds else None}
            h, record.events, record.bytes_read, record.era = histogram(str(copy), task, weight)
            record.read_from = str(copy)
        else:
            (h, record.events, record.bytes_read, record.era), record.fetch = fetch.read(
                route, lambda url: histogram(url, task, weight), retry)
            record.fetch["bytes"] = record.bytes_read
            record.read_from = record.fetch["url"]
        if record.events != task.nevts:
            raise records.FileProblem("event-count", f"{record.read_from} has {record.events} events in 'Events', "
                                      f"the spec says {task.nevts}", "correct nevts (and nevts_total) in the spec")
    except Exception as e:  # the one boundary where a file's failure becomes its record; bugs propagate
        record.failure = records.classify(e)
        if record.failure is None:
            raise
        record.traceback = traceback.format_exc(limit=4)
        h = None
        if copy is not None:
            with contextlib.suppress(FileNotFoundError):
                copy.unlink()
    fetched = record.fetch or {}
    record.cache, record.rack, record.worker_rack = fetched.get("cache"), fetched.get("rack"), fetched.get("worker_rack")
    record.end = time.time()
    record.wall_seconds, record.cpu_seconds = time.perf_counter() - wall0, time.process_time() - cpu0
    return record, h


def run_batch(shard: dict, lumi_pb: float, codec: str | None = None, copies: Path | None = None,
              retry: fetch.Retry = fetch.Retry()) -> dict:
    """Every file of SHARD's batch: {"records", "hist", "events"} (see the module's docstring)."""
    # The site's XRootD client settings, set before the first XRootD read (never through a shell).
    os.environ.update({name: str(value) for name, value in (shard.get("xrootd_client") or {}).items()})
    if copies is not None:
        copies.mkdir(parents=True, exist_ok=True)
    results, total, events = [], None, {}
    for entry in shard["files"]:
        record, h = run_file(entry, shard["batch"], lumi_pb, codec, copies, retry)
        results.append(record.to_dict())
        if h is not None:
            total = h if total is None else total + h
            key = f"{record.process}/{record.variation}"
            events[key] = events.get(key, 0) + record.events
        status = f"FAILED ({record.failure.failure_class}, {record.failure.kind}): {record.error}" if record.failure \
            else f"{record.events} events"
        print(f"{record.fid}: {record.path}: {status}", file=sys.stderr)
    if copies is not None:
        atomic.write_json(copies / "manifest.json", {
            "batch": shard["batch"], "codec": codec,
            "copies": {r["fid"]: f"{Path(r['read_from']).name}" for r in results if r["failure"] is None}})
    return {"records": results, "hist": total, "events": events}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shard", required=True, type=Path, help="the batch's shard of the campaign's index")
    parser.add_argument("--lumi-pb", type=float, required=True)
    parser.add_argument("--recompress", help="<codec>:<level>: recompress each file first and analyse the copy")
    parser.add_argument("--copies", type=Path, help="with --recompress: the directory for the copies")
    parser.add_argument("--read-attempts", type=int, default=fetch.Retry.attempts,
                        help="rounds over a file's sources before a transient failure is recorded")
    parser.add_argument("--read-backoff-s", type=float, default=fetch.Retry.backoff_s,
                        help="wait before the second round; doubled each round, with jitter")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    if args.recompress and not args.copies:
        parser.error("--recompress needs --copies DIR")
    result = run_batch(index.read(args.shard), args.lumi_pb, args.recompress, args.copies,
                       fetch.Retry(args.read_attempts, args.read_backoff_s))
    atomic.write_pickle(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
