"""Writes ``workflows/hepvine/devtools/nanoschema.json``, the committed description of a real NanoAOD file that
``hepvine generate --schema nanoaod`` follows: every TTree's branches in file order (name, numpy type, the counter of a
jagged branch) with a compact summary of the values of each (the fraction true of a bool; the values and their
frequencies when there are few; else seven quantiles and, for floats, the mantissa bits NanoAOD kept), and the
``tag`` string.

Run once, by hand, on the file the description names (never at generate time, which may run where the real files
are not)::

    python benchmarks/extract_nanoschema.py ../shared/nanoaod/ttH_M125_2017.root
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import awkward as ak
import numpy as np
import uproot

OUT = Path(__file__).resolve().parents[1] / "workflows" / "hepvine" / "devtools" / "nanoschema.json"
QUANTILES = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)
FEW = 8  # at most this many distinct values: kept with their frequencies
SOURCE = {  # where the default file comes from (../shared/nanoaod/README.md)
    "ttH_M125_2017.root": "tiwariPC/DarkBottomLine tests/samples/skimmed_nano/ttH_M125_2017.root at "
    "14e9cd6aa4f7260104a6569284be3f63dfeedb48 (BSD-3-Clause; Run 2 2017 ttH simulation, NanoAOD "
    "post-processed with nanoAOD-tools, first 100 events)",
}


def significant(value: float) -> float:
    return float(f"{value:.4g}")


def mantissa_bits(values: np.ndarray) -> int:
    """How many of float32's 23 mantissa bits VALUES use (NanoAOD rounds many floats to 10-16 bits)."""
    mantissa = values.astype(np.float32).view(np.uint32) & 0x7FFFFF
    mantissa = mantissa[mantissa != 0]
    if not len(mantissa):
        return 0
    lowest = mantissa & (~mantissa + np.uint32(1))  # the lowest set bit of each
    return int(23 - np.log2(lowest.astype(np.float64)).min())


def summary(values: np.ndarray) -> tuple:
    """("p", fraction true) | ("v", ((value, frequency), ...)) | ("q", quantiles, mantissa bits or None)."""
    if values.dtype == np.bool_:
        return ("p", significant(values.mean()) if len(values) else 0.0)
    distinct, counts = np.unique(values, return_counts=True)
    if len(distinct) <= FEW:
        return (
            "v",
            tuple(
                (v.item() if values.dtype.kind in "iub" else significant(v), significant(c / len(values)))
                for v, c in zip(distinct, counts)
            ),
        )
    quantiles = tuple(significant(q) for q in np.quantile(values.astype(np.float64), QUANTILES))
    return ("q", quantiles, mantissa_bits(values) if values.dtype.kind == "f" else None)


def counter_of(branch) -> str | None:
    leaf = branch.member("fLeaves")[0]
    count = leaf.member("fLeafCount")
    return None if count is None else count.member("fName")


def describe(tree) -> list[tuple]:
    """(name, numpy type, counter, summary) of every branch of TREE, in file order; counters have counter "counter"."""
    arrays = tree.arrays(library="ak")
    counters = {counter_of(b) for b in tree.values()} - {None}
    out = []
    for branch in tree.values():
        counter = counter_of(branch)
        values = arrays[branch.name]
        flat = ak.to_numpy(ak.flatten(values) if counter else values)
        kind = "counter" if branch.name in counters else counter
        out.append((branch.name, flat.dtype.newbyteorder("=").str.lstrip("<>|="), kind, summary(flat)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "source", type=Path, help="a real NanoAOD file (TTree Events), e.g. ../shared/nanoaod/ttH_M125_2017.root"
    )
    args = parser.parse_args(argv)
    with uproot.open(args.source) as f:
        trees = {name: describe(f[name]) for name, cls in f.classnames(cycle=False).items() if cls == "TTree"}
        tag = str(f["tag"]) if "tag" in f.keys(cycle=False) else None
        entries = f["Events"].num_entries
    digest = hashlib.sha256(args.source.read_bytes()).hexdigest()
    origin = SOURCE.get(args.source.name, "see the file's provenance")
    about = (
        f"The layout of {args.source.name} ({entries} events, sha256 {digest}), {origin}; branches with at most "
        f"{FEW} distinct values keep them with their frequencies."
    )
    lines = [
        f'{{"about":{json.dumps(about)},',
        f'"source":{json.dumps(args.source.name)},',
        f'"quantiles":{json.dumps(QUANTILES)},',
        f'"tag":{json.dumps(tag)},',
        '"trees":{',
    ]
    for i, (name, branches) in enumerate(trees.items()):  # one branch a line: a changed layout is a small diff
        lines.append(f"{json.dumps(name)}:[")
        lines += [
            json.dumps(b, separators=(",", ":")) + ("," if j < len(branches) - 1 else "")
            for j, b in enumerate(branches)
        ]
        lines.append("]" + ("," if i < len(trees) - 1 else ""))
    OUT.write_text("\n".join([*lines, "}}"]) + "\n")
    print(f"wrote {OUT}: {', '.join(f'{k} {len(v)} branches' for k, v in trees.items())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
