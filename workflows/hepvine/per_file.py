"""One input file's analysis, as one task: read the analysis branches with uproot (local path or ``root://``), fill
the histograms, and record what happened — path, events, bytes read, wall and CPU seconds, worker host, start and
end, and the exception text if it failed. The result is a pickle ``{"record": {...}, "hist": Hist | None}``.

A file that cannot be read is a recorded failure, not a crash: the campaign goes on and reports it.
"""

from __future__ import annotations

import argparse
import pickle
import socket
import sys
import time
import traceback
from pathlib import Path

import uproot

from hepvine import analysis, dataset
from hepvine.recompress import FAILURE_MARK

# In entries: a size in bytes ("200 MB") fails in uproot 5.7 for root:// files (TypeError in the basket lookup).
STEP_SIZE = 200_000


def analyse(task: dataset.FileTask, lumi_pb: float, read_from: str | None = None) -> dict:
    """Analyse TASK's file, or READ_FROM instead (its recompressed copy), recording what happened."""
    read_from = read_from or task.path
    record = {"name": task.name, "path": task.path, "read_from": read_from, "process": task.process,
              "variation": task.variation, "events": 0, "bytes_read": 0, "host": socket.gethostname(),
              "start": time.time(), "error": None}
    wall0, cpu0 = time.perf_counter(), time.process_time()
    h = analysis.new_histogram()
    weight = analysis.event_weight(task.xsec, lumi_pb, task.nevts_total)
    try:
        if Path(read_from).is_file():
            with open(read_from, "rb") as f:
                head = f.read(4096)
            if head.startswith(FAILURE_MARK):
                raise RuntimeError(head[len(FAILURE_MARK):].decode(errors="replace"))
        with uproot.open(read_from) as f:
            tree = f["Events"]
            for events in tree.iterate(analysis.BRANCHES, step_size=STEP_SIZE, library="ak"):
                analysis.fill(h, events, task.process, weight)
                record["events"] += int(len(events))
            record["bytes_read"] = int(f.file.source.num_requested_bytes)
        if record["events"] != task.nevts:
            raise ValueError(f"{read_from} has {record['events']} events in 'Events', the spec says {task.nevts}")
    except Exception as e:  # any failure of this file is recorded with its cause; the campaign goes on
        record["error"] = f"{type(e).__name__}: {e}"
        record["traceback"] = traceback.format_exc(limit=3)
        h = None
    record.update(end=time.time(), wall_seconds=time.perf_counter() - wall0, cpu_seconds=time.process_time() - cpu0)
    return {"record": record, "hist": h}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", required=True, help="the campaign's resolved dataset spec")
    parser.add_argument("--task", required=True, help="the file's task name (<process>__<variation>__<index>)")
    parser.add_argument("--lumi-pb", type=float, required=True)
    parser.add_argument("--read-from", help="read this file instead (the input's recompressed copy)")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    by_name = {t.name: t for t in dataset.tasks(dataset.load(args.spec))}
    if args.task not in by_name:
        parser.error(f"no task {args.task!r} in {args.spec}")
    result = analyse(by_name[args.task], args.lumi_pb, args.read_from)
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
