"""One input file's analysis, as one task: read the analysis branches with uproot (over the file's route — home cache
first, then its fail-overs — or from its recompressed copy), fill the histograms, and record what happened — path,
events, bytes read, how the file was fetched (cache, rack, worker's rack, fail-overs), wall and CPU seconds, worker
host, start and end, and the exception text if it failed. The result is a pickle ``{"record": {...}, "hist": Hist | None}``.

A file that cannot be read is a recorded failure, not a crash: the campaign goes on and reports it.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import socket
import sys
import time
import traceback
from pathlib import Path

import uproot

from hepvine import analysis, dataset, fetch
from hepvine.recompress import FAILURE_MARK

# In entries: a size in bytes ("200 MB") fails in uproot 5.7 for root:// files (TypeError in the basket lookup).
STEP_SIZE = 200_000


def _histogram(url: str, task: dataset.FileTask, weight: float) -> tuple:
    """(histogram, events, bytes read) of the file at URL."""
    h = analysis.new_histogram()
    events = 0
    with uproot.open(url) as f:
        for chunk in f["Events"].iterate(analysis.BRANCHES, step_size=STEP_SIZE, library="ak"):
            analysis.fill(h, chunk, task.process, weight)
            events += int(len(chunk))
        return h, events, int(f.file.source.num_requested_bytes)


def analyse(task: dataset.FileTask, lumi_pb: float, route: dict | None = None, copy: str | None = None,
            fetched: dict | None = None) -> dict:
    """Analyse TASK's file over ROUTE (default: its path, read where it is), or its recompressed COPY (a local file;
    FETCHED records how the recompression read the original), recording what happened."""
    record = {"name": task.name, "path": task.path, "read_from": copy, "process": task.process,
              "variation": task.variation, "events": 0, "bytes_read": 0, "host": socket.gethostname(),
              "start": time.time(), "error": None, "fetch": fetched}
    wall0, cpu0 = time.perf_counter(), time.process_time()
    weight = analysis.event_weight(task.xsec, lumi_pb, task.nevts_total)
    try:
        if copy:
            with open(copy, "rb") as f:
                head = f.read(4096)
            if head.startswith(FAILURE_MARK):
                raise RuntimeError(head[len(FAILURE_MARK):].decode(errors="replace"))
            h, record["events"], record["bytes_read"] = _histogram(copy, task, weight)
        else:
            (h, record["events"], record["bytes_read"]), record["fetch"] = fetch.read(
                route or fetch.local_route(task.path), lambda url: _histogram(url, task, weight))
            record["fetch"]["bytes"] = record["bytes_read"]
            record["read_from"] = record["fetch"]["url"]
        if record["events"] != task.nevts:
            raise ValueError(f"{record['read_from']} has {record['events']} events in 'Events', the spec says "
                             f"{task.nevts}")
    except Exception as e:  # any failure of this file is recorded with its cause; the campaign goes on
        record["error"] = f"{type(e).__name__}: {e}"
        record["traceback"] = traceback.format_exc(limit=3)
        h = None
    fetched = record["fetch"] or {}
    # worker_rack: the rack of the worker that read the file from its cache (the recompression's, if it ran);
    # analysis_worker_rack: this task's.
    record.update(cache=fetched.get("cache"), rack=fetched.get("rack"), worker_rack=fetched.get("worker_rack"),
                  analysis_worker_rack=os.environ.get(fetch.WORKER_GROUP_ENV) or None)
    record.update(end=time.time(), wall_seconds=time.perf_counter() - wall0, cpu_seconds=time.process_time() - cpu0)
    return {"record": record, "hist": h}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", required=True, help="the campaign's resolved dataset spec")
    parser.add_argument("--task", required=True, help="the file's task name (<process>__<variation>__<index>)")
    parser.add_argument("--lumi-pb", type=float, required=True)
    parser.add_argument("--route", help="where to read the file: its route as JSON (default: its path)")
    parser.add_argument("--copy", help="read this local file instead (the input's recompressed copy)")
    parser.add_argument("--fetched", type=Path, help="with --copy: how the recompression read the original (JSON)")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    by_name = {t.name: t for t in dataset.tasks(dataset.load(args.spec))}
    if args.task not in by_name:
        parser.error(f"no task {args.task!r} in {args.spec}")
    task = by_name[args.task]
    fetched = json.loads(args.fetched.read_text()) if args.fetched else None
    result = analyse(task, args.lumi_pb, route=fetch.parse_route(args.route, task.path), copy=args.copy,
                     fetched=fetched)
    tmp = args.output.with_name(args.output.name + ".partial")
    with open(tmp, "wb") as f:
        pickle.dump(result, f)
    tmp.replace(args.output)
    record = result["record"]
    status = f"FAILED: {record['error']}" if record["error"] else f"{record['events']} events"
    print(f"{args.task}: {record['path']}: {status}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
