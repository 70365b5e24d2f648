"""One node of the merge tree: the analysis's outputs of several batch (or already merged) results added with coffea's
own ``processor.accumulate`` (dicts key by key, histograms added, sets united, numbers summed), their event counts
summed and every file's record kept. The tree (fan-in ``merge_fan_in``) is laid out by the workflow; this merges one
group (the root's merge is the report's first step: ``hepvine.products.report``). The analysis's module is imported
first, for outputs that hold instances of the user's classes."""

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


class OldResult(Exception):
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


def read_counts(path: Path) -> dict:
    """A batch or merged result at PATH for its records and counts, in a process that has not imported the analysis
    (the main process's progress, ``hepvine compare``): an instance of the analysis's own classes in its output is
    read as a placeholder, whatever else it holds as it is."""
    with open(path, "rb") as f:
        return _Lenient(f).load()


def load(path: Path) -> dict:
    with open(path, "rb") as f:
        result = pickle.load(f)
    if "output" not in result:
        raise OldResult(
            f"{path}: this result was made by an older hepvine, before analyses were plug-ins (it holds "
            "a histogram, not the analysis's output); make the campaign's batch results again: rerun the "
            "same snakemake command with --forcerun analyse"
        )
    return result


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
    atomic.write_pickle(args.output, merged)
    return 0


if __name__ == "__main__":
    sys.exit(main())
