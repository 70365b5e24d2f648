"""One job of a campaign: the files of one batch, each read over its route (home cache first, then its fail-overs),
optionally recompressed first, and analysed by the user's analysis (``hepvine.work.processor``: a coffea processor or a
function, loaded once per job) — one ``FileRecord`` per file, ok or failed with its class, and the accumulated
output of the files that succeeded.

A file's failure never fails or hides its batch-mates: each file is tried on its own and recorded, in a process of
its own that is ended at the file's time limit (``hepvine.model.limits``: a hung or crawling file is a transient
``timeout``, a crashed one a transient ``crashed``). Only failures of the file, its access or the user's analysis
on it are records (``failures.classify``); anything else is a bug in hepvine and fails the job with its traceback.
With config ``columns: auto`` (the default) a file whose processing used a field its cut chunks lack runs again with
every field, in a process forked anew, and so do the job's files after it (``_run_entry``). Output: a result
``{"records": [dict, ...], "output": the analysis's output accumulated over the ok files (coffea's ``accumulate``;
None if none), "events": {dataset: events analysed}}``, written atomically (``hepvine.jobs.merge.write``).
Recompressed copies go to ``--copies DIR/<index>.root`` with ``manifest.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import multiprocessing
import os
import resource
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

from hepvine.jobs import merge
from hepvine.model import atomic, records, sources
from hepvine.model.limits import Limits
from hepvine.reading import failures, fetch
from hepvine.routing import index
from hepvine.work import nanoevents, processor, transcode
from hepvine.work.recompress import parse_codec, recompress, remove_leftovers
from hepvine.work.recompress import start as start_recompression

# The default read retries: one shared instance, as before (fetch.Retry is a frozen dataclass).
DEFAULT_RETRY = fetch.Retry()
# The driver's exit code when the storage refused the job's credential (and nothing of its batch was recorded).
CREDENTIAL_REFUSED_EXIT = 3


class CredentialRefused(Exception):
    """The storage refused the credential the job carries: the job ends with nothing of its batch recorded, since
    the fault is the credential's, not the files' (a renewed credential reads them)."""


def new_record(task, batch: str) -> records.FileRecord:
    return records.FileRecord(
        fid=task.fid,
        path=task.path,
        process=task.process,
        variation=task.variation,
        batch=batch,
        host=socket.gethostname(),
        start=time.time(),
        analysis_worker_rack=os.environ.get(fetch.WORKER_GROUP_ENV) or None,
    )


def run_file(
    entry: dict,
    batch: str,
    analysis: processor.Analysis,
    codec: str | None = None,
    copies: Path | None = None,
    retry: fetch.Retry = DEFAULT_RETRY,
) -> tuple[records.FileRecord, object]:
    """One file of a batch: (its record, the analysis's output or None). With config ``columns: auto`` a file whose
    cut fell short raises ``records.FieldNotMade`` instead (``run_batch`` runs it again with every field)."""
    task = index.task(entry)
    record = new_record(task, batch)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    route = entry["route"]
    copy = copies / f"{task.index}.root" if codec else None
    h = None
    try:
        if codec:
            started, how = time.time(), {}
            (_, source_bytes), record.fetch = fetch.read(
                route, lambda url: recompress(url, copy, parse_codec(codec), how), retry
            )
            seconds = time.time() - started
            record.fetch.update(bytes=source_bytes, start=started, end=time.time())
            copy_bytes = copy.stat().st_size
            record.recompress = {
                "codec": codec,
                "source_bytes": source_bytes,
                "copy_bytes": copy_bytes,
                "seconds": round(seconds, 3),
                "source_mb_per_s": round(source_bytes / 1e6 / seconds, 2) if seconds else None,
                **how,
            }  # engine: transcode, or hadd with the fallback's reason
            # The analysis reads the copy as the file the dataset names: its events.metadata as of the source.
            source_uuid = record.recompress.pop("source_uuid")  # never in the record: the copy's own, whatever task has
            as_source = dataclasses.replace(task, uuid=task.uuid or source_uuid)
            h, record.events, record.bytes_read = processor.run_file(str(copy), as_source, analysis)
            record.read_from = str(copy)
        else:
            (h, record.events, record.bytes_read), record.fetch = fetch.read(
                route, lambda url: processor.run_file(url, task, analysis), retry
            )
            record.fetch["bytes"] = record.bytes_read
            record.read_from = record.fetch["url"]
        expected = task.events_expected()
        if expected is not None and record.events != expected:
            held = f" in the {len(task.steps)} step(s) the fileset gives" if task.steps is not None else ""
            raise records.FileProblem(
                "event-count",
                f"{record.read_from} has {record.events} events in {task.treename!r}{held}, the dataset says "
                f"{expected}",
                "correct nevts (and nevts_total) in the spec, or num_entries (and steps) in the fileset",
            )
    except Exception as e:  # the one boundary where a file's failure becomes its record; bugs propagate
        rerun = isinstance(e, records.FieldNotMade) and analysis.columns == "auto"
        record.failure = None if rerun else failures.classify(e)
        if copy is not None and (rerun or record.failure is not None):  # (no disk held for a run again)
            with contextlib.suppress(FileNotFoundError):
                copy.unlink()
        if record.failure is None:
            raise  # a bug, or (rerun) run_batch runs the file again with every field
        record.traceback = traceback.format_exc(limit=4)
        h = None
    fetched = record.fetch or {}
    record.cache, record.rack = fetched.get("cache"), fetched.get("rack")
    record.worker_rack = fetched.get("worker_rack")
    record.end = time.time()
    record.wall_seconds, record.cpu_seconds = time.perf_counter() - wall0, time.process_time() - cpu0
    return record, h


def _child(send, args: tuple) -> None:
    """In the file's own process: run it and send ("done", (record, histogram), ...) back, or ("not-made", the
    ``records.FieldNotMade`` that stopped it, ...) with config ``columns: auto`` — each with the analysis's traces and
    the base forms it made, those the job had not, and the order it left them in (``nanoevents.follow``) — or ("bug",
    the traceback of a bug)."""
    os.setpgid(0, 0)  # a group of its own, with whatever it starts (ROOT's programs), so that all of it can be ended
    try:
        analysis = args[2]  # (entry, batch, analysis, ...): run_file's arguments
        processor.settle(analysis)  # what the job had made so far, too
        known, known_traces = set(analysis.forms), set(analysis.traced)
        try:
            record, h = run_file(*args)
            what, result = "done", (record.to_dict(), h)
        except records.FieldNotMade as e:  # (columns: auto) the parent runs the file again with every field
            what, result = "not-made", e
        derived = {key: form for key, form in analysis.forms.items() if key not in known}
        traced = {key: read for key, read in analysis.traced.items() if key not in known_traces}
        send.send((what, result, (list(analysis.traced), traced), (list(analysis.forms), derived)))
    except BaseException:  # a bug (run_file records the file's own failures): the parent fails the job with it
        send.send(("bug", traceback.format_exc()))
    finally:
        send.close()


def run_file_limited(entry: dict, batch: str, limit_s: float, args: tuple) -> tuple[records.FileRecord, object]:
    """run_file(ENTRY, BATCH, *ARGS) in a child process that is ended after LIMIT_S seconds: a file that hangs
    (a read that never returns, a crawling cache or disk) or crashes its process becomes a transient failure of its
    own and its batch-mates go on. A bug in hepvine still fails the job, with the child's traceback; a file whose cut
    fell short (config ``columns: auto``) raises the child's ``records.FieldNotMade`` here. What the child traced of
    the analysis (``processor.preload``) and the base forms it derived (``nanoevents.FileChunks``) are kept for the
    files after it, the least recently used of them first as the child left them."""
    context = multiprocessing.get_context("fork")  # the child starts with the parent's imports: milliseconds
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(send, (entry, batch, *args)), daemon=True)
    started = time.perf_counter()
    child.start()
    send.close()
    message = None
    try:
        if receive.poll(limit_s):
            message = receive.recv()
    except EOFError:
        pass  # the child ended without a word: it crashed
    timed_out = message is None and child.is_alive()
    if timed_out:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
    child.join()
    if message is not None and message[0] == "bug":
        raise RuntimeError(
            f"{entry['path']}: hepvine failed on this file (a bug, not the file's fault):\n" + message[1]
        )
    if message is not None:
        what, result, traced, derived = message
        analysis = args[0]  # (analysis, codec, copies, retry)
        nanoevents.follow(analysis.traced, *traced)
        nanoevents.follow(analysis.forms, *derived)
        if what == "not-made":
            raise result
        data, h = result
        return records.FileRecord.from_dict(data), h
    transcode.SHARED.close()  # the child was ended (or crashed), perhaps in the middle of a file sent to it
    record = new_record(index.task(entry), batch)
    record.wall_seconds = time.perf_counter() - started
    record.end = time.time()
    if timed_out:
        record.failure = records.Failure(
            "timeout",
            records.TRANSIENT,
            f"{entry['path']}: not done after {limit_s:.0f} s, its time limit "
            "(file_time_base_s + its size at rate_floor_mb_s); its process was ended",
            "a cache, the network or the worker was too slow: run the same command again (transient failures are "
            "retried); if the file is just slow, lower rate_floor_mb_s or raise file_time_base_s",
        )
    else:
        record.failure = records.Failure(
            "crashed",
            records.TRANSIENT,
            f"{entry['path']}: its process ended without a result ("
            + (f"signal {-child.exitcode}" if child.exitcode and child.exitcode < 0 else f"exit code {child.exitcode}")
            + ": out of memory, or a crash in a reader)",
            "run the same command again; if it crashes again, check the file (uproot, ROOT) and the job's memory "
            "(mem_mb)",
        )
    return record, None


def _cpu_s() -> float:
    """The CPU seconds of this process and of the children it has waited for (the files' own processes, joined)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _run_entry(
    entry: dict,
    batch: str,
    analysis: processor.Analysis,
    codec: str | None,
    copies: Path | None,
    retry: fetch.Retry,
    limits: Limits | None,
) -> tuple[records.FileRecord, object]:
    """One file of BATCH (run_batch's arguments): run_file in the job's process (no LIMITS) or in one of its own; with
    config ``columns: auto``, when the file's processing used a field its chunks were cut without
    (``records.FieldNotMade``), run again with every field: the job's ANALYSIS is made ``columns: all`` for this file
    and the rest of the batch, the job's log says which field, and so does the record (``rerun``). In a file's own
    process (campaigns: each file runs in one, forked from the job), the second run starts from the job's state before
    the file, so its output is what ``columns: all`` gives; in the job's process, what the first run changed of the
    analysis's own state stays. The record's start, wall and CPU time count both runs; its reads, the second's."""

    def attempt():
        if limits is None:
            return run_file(entry, batch, analysis, codec, copies, retry)
        if codec:
            start_recompression()  # the transcoder running before the file's process forks: ROOT starts once
        limit_s = limits.file_limit_s(entry["nevts"], entry.get("bytes"))
        record, h = run_file_limited(entry, batch, limit_s, (analysis, codec, copies, retry))
        if record.failure is not None and copies is not None:
            remove_leftovers(copies / f"{entry['index']}.root")
        return record, h

    started, wall0, cpu0 = time.time(), time.perf_counter(), _cpu_s()
    try:
        return attempt()
    except records.FieldNotMade as e:
        analysis.columns = "all"
        print(
            f"hepvine: columns=auto: {entry['path']}: run again with every field, as the rest of this job's files: "
            f"{e}; set config columns: all to make every field from the start",
            file=sys.stderr,
        )
        first_wall, first_cpu, why = time.perf_counter() - wall0, _cpu_s() - cpu0, str(e)
    record, h = attempt()
    record.start, record.rerun = started, why
    record.wall_seconds, record.cpu_seconds = record.wall_seconds + first_wall, record.cpu_seconds + first_cpu
    return record, h


def run_batch(
    shard: dict,
    analysis: processor.Analysis,
    codec: str | None = None,
    copies: Path | None = None,
    retry: fetch.Retry = DEFAULT_RETRY,
    limits: Limits | None = None,
) -> dict:
    """Every file of SHARD's batch: {"records", "output", "events"} (see the module's docstring). With LIMITS each
    file runs in a process of its own, ended at its time limit (``hepvine.model.limits``)."""
    from coffea.processor import accumulate

    # The site's XRootD client settings, set before the first XRootD read (never through a shell), over hepvine's
    # defaults (fetch.XROOTD_DEFAULTS) where the job's environment has none.
    for name, value in fetch.XROOTD_DEFAULTS.items():
        os.environ.setdefault(name, value)
    os.environ.update({name: str(value) for name, value in (shard.get("xrootd_client") or {}).items()})
    if copies is not None:
        copies.mkdir(parents=True, exist_ok=True)
    results, total, events = [], None, {}
    with contextlib.closing(transcode.SHARED):  # the job's transcoder (if it started one) ends with its batch
        for entry in shard["files"]:
            record, h = _run_entry(entry, shard["batch"], analysis, codec, copies, retry, limits)
            if record.failure is not None and record.failure.kind == "credential":
                raise CredentialRefused(
                    f"the storage refused the credential this job carries: nothing of batch {shard['batch']} is "
                    f"recorded. Fix: {record.failure.fix}; a run still going runs the job again once the credential "
                    f"is renewed. {record.path}: {record.error}"
                )
            results.append(record.to_dict())
            if record.failure is None:
                total = h if total is None else accumulate([h], total)
                dataset = entry["dataset"]
                events[dataset] = events.get(dataset, 0) + record.events
            status = (
                f"FAILED ({record.failure.failure_class}, {record.failure.kind}): {record.error}"
                if record.failure
                else f"{record.events} events"
            )
            print(f"{record.fid}: {record.path}: {status}", file=sys.stderr)
    if copies is not None:
        atomic.write_json(
            copies / "manifest.json",
            {
                "batch": shard["batch"],
                "codec": codec,
                "copies": {r["fid"]: f"{Path(r['read_from']).name}" for r in results if r["failure"] is None},
            },
        )
    return {"records": results, "output": total, "events": events}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shard", required=True, type=Path, help="the batch's shard of the campaign's index")
    parser.add_argument(
        "--analysis", required=True, help="<file.py>:<Name> or <module>:<Name> (hepvine.work.processor)"
    )
    parser.add_argument("--analysis-args", default="{}", help="a JSON mapping: the processor's constructor arguments")
    parser.add_argument("--schema", default=processor.DEFAULT_SCHEMA, help="the NanoEvents schema")
    parser.add_argument(
        "--chunksize",
        type=int,
        default=processor.DEFAULT_CHUNKSIZE,
        help="entries per chunk (coffea's Runner's chunksize)",
    )
    parser.add_argument(
        "--columns",
        choices=processor.COLUMNS,
        default=processor.COLUMNS[0],
        help="the fields a chunk's events are made with: auto (those the analysis's trace reads, the others "
        "placeholders: hepvine.work.cutform; a file that uses one of those runs again with every field), all, or "
        "traced (as auto, but such a file fails as analysis-error)",
    )
    parser.add_argument("--recompress", help="<codec>:<level>: recompress each file first and analyse the copy")
    parser.add_argument("--copies", type=Path, help="with --recompress: the directory for the copies")
    parser.add_argument(
        "--read-attempts",
        type=int,
        default=fetch.Retry.attempts,
        help="rounds over a file's sources before a transient failure is recorded",
    )
    parser.add_argument(
        "--read-backoff-s",
        type=float,
        default=fetch.Retry.backoff_s,
        help="wait before the second round; doubled each round, with jitter",
    )
    parser.add_argument(
        "--rate-floor-mb-s",
        type=float,
        help="with --file-time-base-s and --bytes-per-event: each file runs in a process of its own, "
        "ended after file-time-base-s + its size at this rate (hepvine.model.limits)",
    )
    parser.add_argument("--file-time-base-s", type=float, default=300.0)
    parser.add_argument(
        "--bytes-per-event",
        type=int,
        default=4000,
        help="a file's size, when its spec entry gives none, is its events times this",
    )
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    if args.recompress and not args.copies:
        parser.error("--recompress needs --copies DIR")
    limits = Limits(args.rate_floor_mb_s, args.file_time_base_s, args.bytes_per_event) if args.rate_floor_mb_s else None
    before = sources.version(args.analysis)
    try:
        analysis = processor.load(
            args.analysis, json.loads(args.analysis_args), args.schema, args.chunksize, args.columns
        )
    except processor.AnalysisSpecError as e:
        print(f"hepvine.jobs.driver: {e}", file=sys.stderr)
        return 2
    processor.settle(analysis)
    # The files' version read before and after they were loaded: one that changed meanwhile is a version of its own
    # (which the report counts as another: the job may have run either).
    after = sources.version(args.analysis)
    version = before if before == after else f"{before}>{after}"
    try:
        result = run_batch(
            index.read(args.shard),
            analysis,
            args.recompress,
            args.copies,
            fetch.Retry(args.read_attempts, args.read_backoff_s),
            limits,
        )
    except CredentialRefused as e:
        # Into the job's log (its stderr) and its output, which the executor shows with the job's error (a failed
        # job's log may not come back from its worker).
        for stream in (sys.stderr, sys.stdout):
            print(f"hepvine.jobs.driver: {e}", file=stream)
        return CREDENTIAL_REFUSED_EXIT
    for record in result["records"]:
        record["analysis"] = version
    merge.write(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
