"""The basket transcoder, ``hepvine.recompress``'s fast engine: a small C++ program on ROOT (``transcode.cxx``, built
once per machine and ROOT into a cache directory) that copies a ROOT file recompressing each basket of each TTree as
bytes -- decompressed, compressed with the new codec, written with the tree's basket table updated, as ROOT's fast
cloning does but with a new codec -- instead of un-streaming every entry of every branch as ``hadd`` must when the
codec changes. Other objects are copied as their keys' bytes, recompressed; trees of classes without a dictionary here
(CMSSW's ``MetaData``, ``ParameterSets``) by ROOT's fast clone, as they are.

The program prints a manifest of the source as ROOT reads it: per key its kind; per transcoded tree its entries,
aliases, and per branch its title, class, leaves (name, class, title, length, length type, unsigned, range, counter),
entries, basket boundaries and a SHA-256 of its decompressed baskets. ``described`` gives the same description of the
copy read by uproot (an independent reader): equal descriptions mean every basket of the copy holds the same bytes,
at the same entries, under the same leaf types, as the source's -- hence the same values -- without reading the
source a second time. uproot reads the tree's metadata; the baskets are read in bulk from the file's bytes (one
memory map): each basket's key header at the seek the branch's basket table gives, its size checked against the
table, its blocks decompressed by uproot's own decompression (``uproot.compression.decompress``), hashed as they come.

What it does not copy (RNTuple, directories, branches of classes, baskets kept inside the tree's record) raises
``Unsupported`` before anything is written, any other failure ``TranscodeError``: ``hepvine.recompress`` then uses
``hadd`` and says why.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import uproot

SOURCE = Path(__file__).with_name("transcode.cxx")
EXIT_UNSUPPORTED = 3
ROOT_LIBRARIES = ("Core", "RIO", "Tree")
# A key's header: fNbytes, fVersion, fObjlen, fDatime, fKeylen (big-endian), the rest not needed here.
KEY_HEADER = struct.Struct(">ihiIh")


class Unsupported(Exception):
    """The file holds something the transcoder does not copy (the message says what)."""


class BuildError(RuntimeError):
    """The transcoder cannot be built here: a problem of the environment, not of any file (the job fails)."""


class TranscodeError(RuntimeError):
    """The transcoder failed on a file (the message says how)."""


def root_prefix() -> Path:
    """The installed ROOT's directory holding ``include/`` and ``lib/`` (PyPI's ``root`` wheel), found without
    importing ROOT."""
    spec = importlib.util.find_spec("ROOT")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "include" / "TTree.h").is_file():
            return Path(location)
    config = shutil.which("root-config")  # a ROOT installed another way (conda-forge, LCG views)
    if config:
        prefix = Path(subprocess.run([config, "--prefix"], capture_output=True, text=True).stdout.strip())
        if (prefix / "include" / "TTree.h").is_file():
            return prefix
    raise BuildError("the basket transcoder needs ROOT's headers and libraries (include/TTree.h, lib/libTree.so), "
                     "which this environment lacks: install hepvine with the 'recompress' extra (pip install "
                     "'hepvine[recompress]') or conda-forge's root")


def cache_dir() -> Path:
    """Where built programs are kept: $HEPVINE_CACHE, else $XDG_CACHE_HOME/hepvine or ~/.cache/hepvine, else (no
    writable home, e.g. a batch job) the temporary directory."""
    for candidate in (os.environ.get("HEPVINE_CACHE"),
                      os.environ.get("XDG_CACHE_HOME") and str(Path(os.environ["XDG_CACHE_HOME"]) / "hepvine"),
                      os.environ.get("HOME") and str(Path(os.environ["HOME"]) / ".cache" / "hepvine")):
        if candidate:
            try:
                Path(candidate).mkdir(parents=True, exist_ok=True)
            except OSError:
                continue
            if os.access(candidate, os.W_OK):
                return Path(candidate)
    return Path(tempfile.gettempdir()) / f"hepvine-cache-{os.getuid()}"


def compiler() -> str:
    found = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if not found:
        raise BuildError("the basket transcoder is built at first use and needs a C++ compiler (g++, with the C "
                         "library's headers: Debian's g++ and libc6-dev), which this environment lacks: install them, "
                         "or set CXX to one")
    return found


def program() -> Path:
    """The built transcoder, built now if this machine has none for this source and ROOT."""
    prefix, cxx = root_prefix(), compiler()
    version = (prefix / "include" / "ROOT" / "RVersion.hxx")
    key = hashlib.sha256(SOURCE.read_bytes() + str(prefix).encode() + cxx.encode()
                         + (version.read_bytes() if version.is_file() else b"")).hexdigest()[:16]
    built = cache_dir() / f"transcode-{key}" / "hepvine-transcode"
    if built.is_file():
        return built
    built.parent.mkdir(parents=True, exist_ok=True)
    tmp = built.with_name(f".{built.name}.{os.getpid()}")
    lib = prefix / "lib"
    command = [cxx, "-O2", "-std=c++17", "-DNDEBUG", f"-I{prefix / 'include'}", str(SOURCE), "-o", str(tmp),
               f"-L{lib}", f"-Wl,-rpath,{lib}", *(f"-l{name}" for name in ROOT_LIBRARIES), "-ldl"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 and "ZSTD_" in done.stderr:  # a ROOT linked to a shared libzstd (conda-forge's)
        command.append("-lzstd")
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"building the basket transcoder ({SOURCE}) failed (exit {done.returncode}): "
                         f"{' '.join(command)}\n{done.stderr[-2000:]}")
    os.replace(tmp, built)  # atomic: concurrent jobs on one machine build the same program
    return built


def run(staged: Path, copy: Path, setting: int) -> dict:
    """Copy STAGED to COPY with the compression SETTING; returns the manifest (see the module's docstring)."""
    done = subprocess.run([str(program()), str(staged), str(copy), str(setting)], capture_output=True, text=True,
                          errors="surrogateescape")
    if done.returncode == EXIT_UNSUPPORTED:
        raise Unsupported(done.stderr.strip().removeprefix("unsupported: "))
    if done.returncode != 0:
        tail = "\n".join(line for line in done.stderr.splitlines()[-6:] if line.strip())
        if "No space left on device" in done.stderr:
            raise OSError(errno.ENOSPC, f"{staged}: the worker's disk is full: {tail}")
        raise TranscodeError(f"the basket transcoder failed (exit {done.returncode}): {tail}")
    return json.loads(done.stdout)


def _leaf(leaf) -> list:
    count = leaf.member("fLeafCount")
    return [leaf.member("fName"), leaf.classname, leaf.member("fTitle"), leaf.member("fLen"), leaf.member("fLenType"),
            bool(leaf.member("fIsUnsigned")), bool(leaf.member("fIsRange")),
            count.member("fName") if count is not None else None]


def whole(opened) -> uproot.source.chunk.Chunk:
    """The bytes of the file OPENED (what ``uproot.open`` returned, with ``uproot.MemmapSource``) as one chunk: a
    view of its memory map, nothing read until used."""
    source = opened.file.source
    return source.chunk(0, source.num_bytes)


def basket_digest(branch, chunk) -> str:
    """A SHA-256 over BRANCH's decompressed baskets (each basket's whole payload, as ROOT's key holds it), read from
    CHUNK (``whole``) at the seeks of the branch's basket table; ``unreadable: ...`` saying why for a basket whose
    key does not match the table or whose blocks do not decompress."""
    digest, raw = hashlib.sha256(), chunk.raw_data
    seeks, sizes = branch.member("fBasketSeek"), branch.member("fBasketBytes")
    for i in range(branch.num_baskets):
        seek, size = int(seeks[i]), int(sizes[i])
        try:
            nbytes, _, objlen, _, keylen = KEY_HEADER.unpack_from(raw, seek)
            if nbytes != size or not 0 < keylen <= nbytes or seek + nbytes > len(raw):
                raise ValueError(f"its key says {nbytes} bytes ({keylen} of header), the basket table {size}, "
                                 f"the file has {len(raw)}")
            if nbytes - keylen == objlen:  # stored as it is (ROOT's rule)
                digest.update(raw[seek + keylen:seek + nbytes])
                continue
            blocks = []
            payload = uproot.compression.decompress(chunk, uproot.source.cursor.Cursor(seek + keylen), {},
                                                    nbytes - keylen, objlen, blocks).raw_data
            if sum(block[2] for block in blocks) != objlen:
                raise ValueError(f"its blocks hold {sum(block[2] for block in blocks)} bytes, its key {objlen}")
            digest.update(payload)
        except Exception as e:  # a damaged basket: each decompressor raises its own types; the copy then differs
            return f"unreadable: basket {i} at byte {seek}: {type(e).__name__}: {e}"
    return digest.hexdigest()


def _branch(branch, chunk) -> dict:
    return {"name": branch.name, "title": branch.title, "class": branch.classname, "entries": branch.num_entries,
            "basket_entry": [int(n) for n in branch.member("fBasketEntry")[:branch.num_baskets + 1]],
            "sha256": basket_digest(branch, chunk), "leaves": [_leaf(leaf) for leaf in branch.member("fLeaves")]}


def described(tree, chunk) -> dict:
    """The copy's TREE (read by uproot; CHUNK: ``whole`` of its file) described as the manifest describes a
    transcoded tree of the source."""
    return {"kind": "transcode", "entries": tree.num_entries, "aliases": dict(tree.aliases or {}),
            "branches": [_branch(b, chunk) for b in tree.branches]}
