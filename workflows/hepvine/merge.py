"""One node of the merge tree: sum the histograms and event counts of several batch (or already merged) results, keep
every file's record and join the histogram variations each process fills. The tree (fan-in ``merge_fan_in``) is laid
out by the workflow; this merges one group."""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

from hepvine import atomic


def merge(results: list[dict]) -> dict:
    """{"records": every file's record, "hist": the sum of the histograms (None if none), "events": the summed
    events per "<process>/<variation>" of the files that succeeded, "variations": per process, the histogram
    variations any of its files fills}."""
    records, total, events, variations = [], None, {}, {}
    for result in results:
        records += result["records"]
        if result["hist"] is not None:
            total = result["hist"].copy() if total is None else total + result["hist"]
        for key, n in result["events"].items():
            events[key] = events.get(key, 0) + n
        for process, names in result["variations"].items():
            variations[process] = sorted({*variations.get(process, ()), *names})
    return {"records": records, "hist": total, "events": events, "variations": variations}


class OldResult(Exception):
    """A batch result written by an hepvine from before the AGC variation conventions (it lists no variations)."""


def load(path: Path) -> dict:
    with open(path, "rb") as f:
        result = pickle.load(f)
    if "variations" not in result:
        raise OldResult(f"{path}: this result was made by an older hepvine, whose histograms filled every spec sample "
                        "into 'nominal' and 'pt_scale_up' (it lists no variations); make the campaign's batch results "
                        "again: rerun the same snakemake command with --forcerun analyse")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("inputs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    try:
        results = [load(p) for p in args.inputs]
    except OldResult as e:
        print(f"hepvine.merge: {e}", file=sys.stderr)
        return 1
    atomic.write_pickle(args.output, merge(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
