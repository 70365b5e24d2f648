"""Recompress one ROOT file (e.g. LZMA NanoAOD) to another codec (ZSTD reads several times faster): every TTree,
every branch, the same entries and identical values. The copy is written under a temporary name and renamed only
after it is verified — entries per tree and a checksum per branch against the source. Objects that are not TTrees
cannot be copied this way: they are listed in the error, never silently dropped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import awkward as ak
import numpy as np
import uproot

from hepvine import fetch
from hepvine.generate import branch_type

CHUNK_ENTRIES = 100_000
# With --record-failure, a file that cannot be recompressed gets this line and the cause instead of a copy, so the
# campaign goes on and the analysis reports the cause (see per_file.py).
FAILURE_MARK = b"hepvine: recompression failed: "
CODECS = {"zstd": uproot.ZSTD, "lzma": uproot.LZMA, "zlib": uproot.ZLIB, "lz4": uproot.LZ4}


class RecompressError(RuntimeError):
    pass


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


def _checksums(tree) -> dict[str, str]:
    sums = {}
    for name in tree.keys():
        digest = hashlib.sha256()
        for arrays in tree.iterate([name], step_size=CHUNK_ENTRIES, library="ak"):
            digest.update(np.ascontiguousarray(ak.to_numpy(ak.flatten(arrays[name], axis=None))).tobytes())
        sums[name] = digest.hexdigest()
    return sums


def recompress(source: str, destination: Path, compression) -> tuple[dict, int]:
    """Copy SOURCE to DESTINATION with COMPRESSION; returns ({tree: entries}, bytes read from SOURCE)."""
    with uproot.open(source) as src:
        classes = src.classnames(cycle=False)
        others = sorted(f"{k} ({v})" for k, v in classes.items() if v != "TTree")
        if others:
            raise RecompressError(f"{source}: cannot copy non-TTree object(s) {', '.join(others)}; "
                                  "recompress only files that hold TTrees (NanoAOD does)")
        trees = sorted(classes)
        tmp = destination.with_name(destination.name + ".partial")
        destination.parent.mkdir(parents=True, exist_ok=True)
        with uproot.recreate(tmp, compression=compression) as dst:
            for name in trees:
                tree = src[name]
                collections, flat = _layout(tree)
                out = None
                for arrays in tree.iterate(library="ak", step_size=CHUNK_ENTRIES):
                    chunk = _chunk(arrays, collections, flat)
                    if out is None:
                        out = dst.mktree(name, {k: branch_type(v) for k, v in chunk.items()})
                    out.extend(chunk)
        entries = {name: src[name].num_entries for name in trees}
        with uproot.open(tmp) as copy:
            for name in trees:
                if copy[name].num_entries != entries[name]:
                    raise RecompressError(f"{source}: tree {name}: {copy[name].num_entries} entries in the copy, "
                                          f"{entries[name]} in the source")
                if set(copy[name].keys()) != set(src[name].keys()):
                    missing = sorted(set(src[name].keys()) - set(copy[name].keys()))
                    raise RecompressError(f"{source}: tree {name}: branches not copied: {', '.join(missing)}")
                if _checksums(copy[name]) != _checksums(src[name]):
                    raise RecompressError(f"{source}: tree {name}: values differ between copy and source")
        nbytes = int(src.file.source.num_requested_bytes)
    tmp.replace(destination)
    return entries, nbytes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="input file (local path or root:// URL)")
    parser.add_argument("destination", type=Path)
    parser.add_argument("--codec", default="zstd:5", help="<codec>:<level>, e.g. zstd:5 (default)")
    parser.add_argument("--route", help="where to read SOURCE: its route as JSON (default: SOURCE itself)")
    parser.add_argument("--fetched", type=Path, help="write how SOURCE was read here (JSON)")
    parser.add_argument("--record-failure", action="store_true",
                        help="on failure, write the cause to DESTINATION (marked) and exit 0")
    args = parser.parse_args(argv)
    route = fetch.parse_route(args.route, args.source)
    fetched = {**fetch.record(route, route["sources"][0], []), "bytes": 0, "error": None, "start": time.time()}
    try:
        compression = parse_codec(args.codec)
        (entries, fetched["bytes"]), how = fetch.read(
            route, lambda url: recompress(url, args.destination, compression))
        fetched.update(how)
    except Exception as e:  # any failure of this file: reported with its cause
        fetched["error"] = f"{type(e).__name__}: {e}"
        print(f"recompress: {args.source}: {fetched['error']}", file=sys.stderr)
        if not args.record_failure:
            return 1
        args.destination.parent.mkdir(parents=True, exist_ok=True)
        args.destination.write_bytes(FAILURE_MARK + f"{args.source}: {fetched['error']}".encode())
        return 0
    finally:
        fetched["end"] = time.time()
        if args.fetched:
            args.fetched.write_text(json.dumps(fetched, indent=2) + "\n")
    print(f"recompress: {args.source} via {fetched['url']} → {args.destination} ({args.codec}): "
          + ", ".join(f"{k} {v} entries" for k, v in entries.items()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
