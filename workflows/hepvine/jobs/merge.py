"""One node of the merge tree: the analysis's outputs of several batch (or already merged) results added with coffea's
own ``processor.accumulate`` (dicts key by key, histograms added, sets united, numbers summed), their event counts
summed and every file's record kept. The tree (fan-in ``merge_fan_in``) is laid out by the workflow; this merges one
group (the root's merge is the report's first step: ``hepvine.products.report``). The analysis's module is imported
first, for outputs that hold instances of the user's classes.

A result on disk (``write``; the driver's and each merge node's) is two pickles: its records and event counts, then the
analysis's output. So what reads only the records (``read_records``: the progress, the retries of a run that ended in
an error) reads a few kB of each result, not its histograms."""

from __future__ import annotations

import argparse
import pickle
import sys
from collections.abc import Iterable
from pathlib import Path

from hepvine.model import atomic


def merge(results: Iterable[dict]) -> dict:
    """{"records": every file's record, "output": the analysis's outputs accumulated (None if none), "events": the
    summed events per dataset of the files that succeeded}. RESULTS is gone through once: given as a generator that
    reads each from its file, only the sum, the output being added and the next one read are held, whatever the
    fan-in."""
    from coffea.processor import accumulate

    records, events = [], {}

    def outputs():
        for result in results:
            records.extend(result["records"])
            for key, n in result["events"].items():
                events[key] = events.get(key, 0) + n
            yield result["output"]

    output = accumulate(outputs())
    return {"records": records, "output": output, "events": events}


class OldResult(ValueError):
    """A batch result written by an hepvine from before analyses were plug-ins (it holds no "output")."""


class _Unknown:
    """What an instance of a class that cannot be imported here (the analysis's own) is read as by ``read_counts``."""

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass


class _Lenient(pickle.Unpickler):
    """An unpickler that reads an instance of a class it cannot import as an ``_Unknown``."""

    def find_class(self, module: str, name: str):
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):
            return _Unknown


HEAD = ("records", "events")  # the first pickle of a result; the output is the second


def write(path: str | Path, result: dict) -> None:
    """RESULT ({"records", "output", "events"}) into PATH, atomically, records and counts first."""
    with atomic.replacing(path) as tmp, open(tmp, "wb") as f:
        pickle.dump({key: result[key] for key in HEAD}, f, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.dump(result["output"], f, protocol=pickle.HIGHEST_PROTOCOL)


def _read(f, unpickler, path: Path, with_output: bool) -> dict:
    head = unpickler(f).load()
    if not isinstance(head, dict) or "output" in head:
        return head  # one pickle: a result of an hepvine from before 2026-11-27, written by hand, or not a result
    if not with_output:
        return head  # its records and counts (a result from before analyses were plug-ins has them too)
    if tuple(head) != HEAD:
        raise OldResult(
            f"{path}: this result was made by an older hepvine, before analyses were plug-ins (it holds "
            "a histogram, not the analysis's output); make the campaign's batch results again: rerun the "
            "same snakemake command with --forcerun analyse"
        )
    return {**head, "output": unpickler(f).load()}


# What reading a result's records may raise when the file is not one (torn, foreign, or not a pickle of a result):
# what its readers that go on without it (the progress, the retries of a run that ended in an error) skip.
UNREADABLE = (OSError, EOFError, pickle.UnpicklingError, ValueError, KeyError, TypeError)


def read_records(path: Path) -> dict:
    """The records and event counts ({"records", "events"}) of the result at PATH, its output left unread (an older
    result of one pickle is read whole, the analysis's classes as placeholders). (An hepvine from before 2026-11-27
    reads only the first pickle of a result written since, and takes it for one from before analyses were plug-ins.)"""
    with open(path, "rb") as f:
        return _read(f, _Lenient, path, with_output=False)


def read_counts(path: Path) -> dict:
    """A batch or merged result at PATH, whole, in a process that has not imported the analysis (``hepvine
    compare``): an instance of the analysis's own classes in its output is read as a placeholder, whatever else it
    holds as it is."""
    with open(path, "rb") as f:
        return _read(f, _Lenient, path, with_output=True)


def load(path: Path) -> dict:
    """The result at PATH, whole; the analysis's classes must be importable."""
    with open(path, "rb") as f:
        return _read(f, pickle.Unpickler, path, with_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument(
        "--analysis", help="<file.py>:<Name> or <module>:<Name>: its module is imported first (its classes unpickle)"
    )
    parser.add_argument("inputs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    from hepvine.work import processor  # here: the readers of counts import this module without the analysis's

    try:
        if args.analysis:
            processor.make_importable(args.analysis)
        merged = merge(load(p) for p in args.inputs)
    except (OldResult, processor.AnalysisSpecError) as e:
        print(f"hepvine.jobs.merge: {e}", file=sys.stderr)
        return 1
    write(args.output, merged)
    return 0


if __name__ == "__main__":
    sys.exit(main())
