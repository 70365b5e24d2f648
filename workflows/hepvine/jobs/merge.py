"""One node of the merge tree: the analysis's outputs of several batch (or already merged) results added with
coffea's own ``processor.accumulate`` (dicts key by key, histograms added, sets united, numbers summed), their event
counts summed and every file's record kept. The tree (fan-in ``merge_fan_in``) is laid out by the workflow; this
merges one group."""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

from hepvine.model import atomic


def merge(results: list[dict]) -> dict:
    """{"records": every file's record, "output": the analysis's outputs accumulated (None if none), "events": the
    summed events per dataset of the files that succeeded}."""
    from coffea.processor import accumulate

    records, events = [], {}
    for result in results:
        records += result["records"]
        for key, n in result["events"].items():
            events[key] = events.get(key, 0) + n
    return {"records": records, "output": accumulate(r["output"] for r in results), "events": events}


class OldResult(Exception):
    """A batch result written by an hepvine from before analyses were plug-ins (it holds no "output")."""


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
    parser.add_argument("inputs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    try:
        results = [load(p) for p in args.inputs]
    except OldResult as e:
        print(f"hepvine.jobs.merge: {e}", file=sys.stderr)
        return 1
    atomic.write_pickle(args.output, merge(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
