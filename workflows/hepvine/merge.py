"""One node of the merge tree: sum the histograms of several per-file (or already merged) results and keep every
file's record. The tree (fan-in ``merge_fan_in``) is laid out by the workflow; this merges one group."""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path


def merge(results: list[dict]) -> dict:
    """{"records": [...every file...], "hist": sum of the histograms of the files that succeeded, or None}."""
    records, total = [], None
    for result in results:
        records += result["records"] if "records" in result else [result["record"]]
        if result["hist"] is not None:
            total = result["hist"].copy() if total is None else total + result["hist"]
    return {"records": records, "hist": total}


def load(path: Path) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("inputs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    merged = merge([load(p) for p in args.inputs])
    tmp = args.output.with_name(args.output.name + ".partial")
    with open(tmp, "wb") as f:
        pickle.dump(merged, f)
    tmp.replace(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
