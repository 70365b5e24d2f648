"""Recompress one ROOT file (e.g. LZMA NanoAOD) to another codec (ZSTD reads several times faster): every TTree,
every branch, the same entries and identical values. The copy is written under a temporary name and renamed only
after it is verified — entries per tree and a checksum per branch against the source, the source's taken from the
reads that made the copy (the source is read once). Objects that are not TTrees
cannot be copied this way: they are listed in the error, never silently dropped.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import awkward as ak
import numpy as np
import uproot

from hepvine import atomic
from hepvine.generate import branch_type
from hepvine.records import FileProblem

CHUNK_ENTRIES = 100_000
CODECS = {"zstd": uproot.ZSTD, "lzma": uproot.LZMA, "zlib": uproot.ZLIB, "lz4": uproot.LZ4}


class RecompressError(FileProblem):
    """The file cannot be copied faithfully (a permanent problem of the file)."""

    def __init__(self, message: str):
        super().__init__("not-copyable", message, "recompress only files that hold TTrees only, or run with "
                         "recompress=off")


def parse_codec(text: str):
    """'zstd:5' → uproot.ZSTD(5)."""
    name, _, level = text.partition(":")
    if name not in CODECS or not level.isdigit():
        raise RecompressError(f"codec {text!r}: write it as <{'|'.join(CODECS)}>:<level>, e.g. zstd:5")
    return CODECS[name](int(level))


def _layout(tree) -> tuple[dict[str, list[str]], list[str]]:
    """Branches grouped by counter (``nJet`` → the ``Jet_*`` branches), and the flat ones without a counter."""
    collections: dict[str, list[str]] = {}
    flat = []
    counters = {b.count_branch.name for b in tree.branches if b.count_branch is not None}
    for branch in tree.branches:
        if branch.count_branch is not None:
            collections.setdefault(branch.count_branch.name, []).append(branch.name)
        elif branch.name not in counters:
            flat.append(branch.name)
    return collections, flat


def _chunk(arrays, collections: dict[str, list[str]], flat: list[str]) -> dict:
    out = {name: ak.to_numpy(arrays[name]) for name in flat}
    for counter, branches in collections.items():
        prefix = counter[1:]  # nJet → Jet, whose branches are Jet_<field>
        out[prefix] = ak.zip({b[len(prefix) + 1:]: arrays[b] for b in branches})
    return out


def _digest(digests: dict, arrays) -> None:
    """Add a chunk of every branch in ARRAYS to its running sha256 in DIGESTS."""
    for name in arrays.fields:
        flat = ak.to_numpy(ak.flatten(arrays[name], axis=None))
        digests.setdefault(name, hashlib.sha256()).update(np.ascontiguousarray(flat).tobytes())


def _checksums(tree) -> dict[str, str]:
    """A sha256 per branch of TREE, reading every branch once, in bulk."""
    digests: dict = {}
    for arrays in tree.iterate(library="ak", step_size=CHUNK_ENTRIES):
        _digest(digests, arrays)
    return {name: d.hexdigest() for name, d in digests.items()}


def recompress(source: str, destination: Path, compression) -> tuple[dict, int]:
    """Copy SOURCE to DESTINATION with COMPRESSION; returns ({tree: entries}, bytes read from SOURCE)."""
    with uproot.open(source) as src:
        classes = src.classnames(cycle=False)
        others = sorted(f"{k} ({v})" for k, v in classes.items() if v != "TTree")
        if others:
            raise RecompressError(f"{source}: cannot copy non-TTree object(s) {', '.join(others)}; "
                                  "recompress only files that hold TTrees (NanoAOD does)")
        trees = sorted(classes)
        with atomic.replacing(destination) as tmp:
            entries = _verify(source, src, trees, tmp, _copy(src, trees, tmp, compression))
        nbytes = int(src.file.source.num_requested_bytes)
    return entries, nbytes


def _copy(src, trees: list[str], tmp: Path, compression) -> dict[str, dict[str, str]]:
    """Write SRC's TREES to TMP; the source's checksums per tree and branch, taken from the same reads."""
    sums = {}
    with uproot.recreate(tmp, compression=compression) as dst:
        for name in trees:
            tree = src[name]
            collections, flat = _layout(tree)
            out = None
            digests: dict = {}
            for arrays in tree.iterate(library="ak", step_size=CHUNK_ENTRIES):
                _digest(digests, arrays)
                chunk = _chunk(arrays, collections, flat)
                if out is None:
                    out = dst.mktree(name, {k: branch_type(v) for k, v in chunk.items()})
                out.extend(chunk)
            sums[name] = {b: d.hexdigest() for b, d in digests.items()}
    return sums


def _verify(source: str, src, trees: list[str], tmp: Path, sums: dict) -> dict[str, int]:
    """{tree: entries}, after checking the copy at TMP against SRC: entries, branch names, a checksum per branch
    (SUMS: the source's, from the copying reads)."""
    entries = {name: src[name].num_entries for name in trees}
    with uproot.open(tmp) as copy:
        for name in trees:
            if copy[name].num_entries != entries[name]:
                raise RecompressError(f"{source}: tree {name}: {copy[name].num_entries} entries in the copy, "
                                      f"{entries[name]} in the source")
            if set(copy[name].keys()) != set(src[name].keys()):
                missing = sorted(set(src[name].keys()) - set(copy[name].keys()))
                raise RecompressError(f"{source}: tree {name}: branches not copied: {', '.join(missing)}")
            if _checksums(copy[name]) != sums[name]:
                raise RecompressError(f"{source}: tree {name}: values differ between copy and source")
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="input file (local path or root:// URL)")
    parser.add_argument("destination", type=Path)
    parser.add_argument("--codec", default="zstd:5", help="<codec>:<level>, e.g. zstd:5 (default)")
    args = parser.parse_args(argv)
    try:
        entries, nbytes = recompress(args.source, args.destination, parse_codec(args.codec))
    except (OSError, FileProblem) as e:
        print(f"recompress: {args.source}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"recompress: {args.source} → {args.destination} ({args.codec}, {nbytes:,} bytes read): "
          + ", ".join(f"{k} {v} entries" for k, v in entries.items()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
