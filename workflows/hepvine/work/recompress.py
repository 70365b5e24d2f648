"""Recompress one ROOT file (e.g. CMSSW NanoAOD in LZMA) to another codec (ZSTD reads several times faster), keeping
every object of the source: the copy has the same keys, classes, titles, trees, branches (exact types, titles,
counters), entries and values. It is written under a temporary name and renamed into place only once verified.

The engine is ROOT itself (the ``recompress`` extra: PyPI's ``root`` wheel), chosen by measurement on the real
NanoAOD of ``../shared/nanoaod`` (README, "Recompression"): uproot cannot write the classes CMSSW writes (``tag``,
``edm::ProcessHistory``), loses unsigned counters and branch titles. The source is first staged to local disk (read
once, over its route; ``root://`` through fsspec-xrootd, as the analysis); then one of two engines copies it:

- **transcode** (``hepvine.work.transcode``, tried first; one program per job, sent the files one by one): each basket
  of each TTree -- CMSSW's ``MetaData`` and ``ParameterSets``, whose classes have no dictionary here, too -- is
  decompressed and compressed again as bytes, never un-streamed; other objects are copied as their keys' bytes,
  recompressed: every record of the copy is in the new codec (or stored, where it would not shrink). The copy is
  verified against the manifest the transcoder printed of the
  source (ROOT's reading of it): same keys, classes and titles; per transcoded tree its entries and aliases, per
  branch its title, class, leaves (types, unsigned, counters), entries, basket boundaries and a SHA-256 of its
  decompressed baskets, read from the copy independently of ROOT (the tree's record decompressed by uproot and read
  for those members alone; the baskets in bulk from the copy's memory map, decompressed by uproot's own
  decompression) — the same bytes under the same types are the same values; other objects as below.
- **hadd** (when the file holds what the transcoder does not copy: RNTuple, branches of classes, baskets kept in the
  tree's record; the report says why): ``hadd -f<setting>`` writes the copy, every basket of every TTree (and every
  RNTuple page) un-streamed and recompressed, every other object copied; the trees of classes without a dictionary
  are left out and copied verbatim by ``rootcp``, their baskets in their old codec: the file's record says so
  (``kept_codec``: each such tree and why). The copy is verified against the source: same keys, classes and
  titles; per TTree the entries, branch names, titles, leaf types and aliases, then one bulk read of all branches of
  source and copy with a sha256 per branch; verbatim trees byte for byte (decompressed baskets); RNTuples by entries
  and the values of every field, and every page of the copy's RNTuples must carry the new codec (or be stored as it
  is, where compression would not shrink it), read from the pages' own bytes: hadd that leaves a page in its old
  codec fails the file; other objects by their members (TObject bits aside).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import importlib.util
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import awkward as ak
import fsspec
import numpy as np
import uproot

from hepvine.model import atomic, records
from hepvine.model.records import FileProblem
from hepvine.reading import failures, fetch
from hepvine.work import transcode
from hepvine.work.processor import file_uuid

# ROOT's compression algorithm numbers (ROOT::RCompressionSetting::EAlgorithm): setting = 100 * algorithm + level.
CODECS = {"zlib": 1, "lzma": 2, "lz4": 4, "zstd": 5}
# The two letters that open each compressed block of ROOT's (a basket's, an RNTuple page's), by algorithm.
BLOCK_TAGS = {b"ZS": "zstd", b"XZ": "lzma", b"ZL": "zlib", b"CS": "zlib", b"L4": "lz4"}
PAGE_CHECKSUM_BYTES = 8  # an RNTuple page written with a checksum ends with one (xxhash3)
CHUNK_ENTRIES = 100_000
KEPT_BY_ROOTCP = (
    "copied by rootcp with its baskets as they are: hadd cannot rewrite a tree whose classes have no dictionary here, "
    "and the transcoder did not copy this file (see fallback)"
)
STAGE_CHUNK_BYTES = 16 << 20
# Object members that say how an object sat in memory when written, not what it holds (TObject's bits).
RUNTIME_MEMBERS = {"@fUniqueID", "@fBits"}


class RecompressError(FileProblem):
    """The file cannot be copied faithfully (a permanent problem of the file)."""

    def __init__(self, message: str):
        super().__init__(
            "not-copyable",
            message,
            "recompress only files that ROOT can copy (see the message), or run with recompress=off",
        )


class RootMissing(RuntimeError):
    """ROOT is not installed where the job runs: a problem of the environment, not of any file (the job fails)."""


@dataclass(frozen=True)
class Codec:
    """A ROOT compression setting: ``zstd:5`` → algorithm 5, level 5, setting 505."""

    name: str
    level: int

    @property
    def setting(self) -> int:
        return 100 * CODECS[self.name] + self.level

    def __str__(self) -> str:
        return f"{self.name}:{self.level}"


def parse_codec(text: str) -> Codec:
    """'zstd:5' → Codec('zstd', 5)."""
    name, _, level = text.partition(":")
    if name not in CODECS or not level.isdigit() or not 0 <= int(level) <= 9:
        raise RecompressError(f"codec {text!r}: write it as <{'|'.join(CODECS)}>:<level 0-9>, e.g. zstd:5")
    return Codec(name, int(level))


def root_program(name: str) -> str:
    """The path of ROOT's program NAME (hadd, rootcp) from the installed ``root`` package, found without importing
    ROOT (seconds, hundreds of MB)."""
    spec = importlib.util.find_spec("ROOT")
    program = (
        Path(spec.submodule_search_locations[0]) / "bin" / name if spec and spec.submodule_search_locations else None
    )
    if program is None or not program.is_file():
        found = shutil.which(name)  # a ROOT installed another way (conda-forge, LCG views)
        if found:
            return found
        raise RootMissing(
            f"recompression needs ROOT's {name}, which this environment lacks: install hepvine with the "
            "'recompress' extra (pip install 'hepvine[recompress]', Python 3.13 on Linux x86_64) or "
            "conda-forge's root, or run with recompress=off"
        )
    return str(program)


@dataclass
class Plan:
    """What a source holds and how each of its objects is copied."""

    classes: dict[str, str]  # key name → class name (latest cycles)
    opened: dict = field(default_factory=dict, repr=False)  # tree name → the source's tree (uproot reads one slowly)
    recompressed_trees: list[str] = field(default_factory=list)
    verbatim_trees: list[str] = field(default_factory=list)  # copied with their baskets as they are
    rntuples: list[str] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)


def _numeric(branch) -> bool:
    """Whether uproot reads BRANCH as numbers (flat or jagged): what hadd recompresses and the check reads back."""
    try:
        interpretation = branch.interpretation
    except Exception:  # uproot: no interpretation for this class (raises several types); that is the answer
        return False
    if isinstance(interpretation, uproot.AsJagged):
        interpretation = interpretation.content
    return isinstance(interpretation, uproot.AsDtype)


def plan(src) -> Plan:
    """The copy's plan for the open file SRC."""
    result = Plan(classes=src.classnames(cycle=False))
    for name, cls in result.classes.items():
        if "/" in name:
            raise RecompressError(
                f"{src.file_path}: {name}: objects inside directories are not recompressed; "
                "NanoAOD keeps its trees at the top level"
            )
        if cls == "TTree":
            tree = result.opened[name] = src[name]
            target = result.recompressed_trees if all(_numeric(b) for b in tree.branches) else result.verbatim_trees
            target.append(name)
        elif cls == "ROOT::RNTuple":
            result.rntuples.append(name)
        elif cls != "TDirectory":
            result.objects.append(name)
    return result


def _run(args: list[str], what: str, source: str) -> None:
    """Run ROOT's program (ARGS, no shell); its failure is the file's (RecompressError), but a full disk is the
    worker's (OSError ENOSPC: transient, retried)."""
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(line for line in done.stderr.splitlines()[-6:] if line.strip())
        if "No space left on device" in done.stderr:
            raise OSError(errno.ENOSPC, f"{source}: {what}: the worker's disk is full: {tail}")
        raise RecompressError(f"{source}: {what} failed (exit {done.returncode}): {tail}")


def stage(source: str, local: Path) -> int:
    """Copy SOURCE (a path or root:// URL) to LOCAL; returns the bytes read."""
    nbytes = 0
    with fsspec.open(source, "rb") as f, open(local, "wb") as out:
        while chunk := f.read(STAGE_CHUNK_BYTES):
            out.write(chunk)
            nbytes += len(chunk)
    return nbytes


def write_copy(staged: Path, tmp: Path, what: Plan, codec: Codec, source: str) -> None:
    """Write the copy of STAGED to TMP following WHAT."""
    command = [root_program("hadd"), f"-f{codec.setting}"]
    skipped = tmp.with_name(tmp.name + ".verbatim")
    try:
        if what.verbatim_trees:
            skipped.write_text("".join(f"{name}\n" for name in what.verbatim_trees))
            command += ["-L", str(skipped), "-Ltype", "SkipListed"]
        _run(command + [str(tmp), str(staged)], "hadd", source)
        if what.verbatim_trees:
            _run(
                [root_program("rootcp"), *(f"{staged}:{name}" for name in what.verbatim_trees), str(tmp)],
                "rootcp",
                source,
            )
    finally:
        skipped.unlink(missing_ok=True)


def _add_values(digests: dict, arrays, names) -> None:
    """Add the values of each of NAMES in ARRAYS (a chunk), flattened, to its running sha256 in DIGESTS."""
    for name in names:
        flat = ak.to_numpy(ak.flatten(arrays[name], axis=None))
        digests.setdefault(name, hashlib.sha256()).update(np.ascontiguousarray(flat).tobytes())


def _branch_checksums(tree, names: list[str]) -> dict[str, str]:
    """A sha256 per branch of TREE (NAMES), reading all of them at once, chunk by chunk."""
    digests = {name: hashlib.sha256() for name in names}
    for arrays in tree.iterate(names, library="ak", step_size=CHUNK_ENTRIES):
        _add_values(digests, arrays, names)
    return {name: d.hexdigest() for name, d in digests.items()}


def _tree_shape(tree) -> dict:
    """What a TTree is, values aside: entries, aliases, and per branch its title, class and leaves."""
    return {
        "entries": tree.num_entries,
        "aliases": dict(tree.aliases or {}),
        "branches": {
            b.name: (
                b.title,
                b.classname,
                [(leaf.member("fName"), leaf.classname, leaf.member("fTitle")) for leaf in b.member("fLeaves")],
            )
            for b in tree.branches
        },
    }


def _raw_baskets(tree, chunk) -> dict[str, str]:
    """A sha256 per branch of TREE over its decompressed baskets, read from CHUNK (``transcode.whole`` of its file),
    for classes uproot cannot read as values."""
    return {branch.name: transcode.branch_digest(branch, chunk) for branch in tree.branches}


def _rntuple_values(ntuple) -> dict:
    """An RNTuple's entries and a sha256 per field of its values."""
    digests = {}
    arrays = ntuple.arrays()
    _add_values(digests, arrays, arrays.fields)
    return {"entries": ntuple.num_entries, "values": {k: d.hexdigest() for k, d in digests.items()}}


def _page_codec(raw, offset: int, size: int) -> str:
    """The algorithm of the page of SIZE bytes at OFFSET of RAW (a file's bytes): that of its ROOT blocks when they
    fill the page exactly (its checksum aside), else "stored" (kept as it is, where compression would not shrink it)."""
    position, end, tags = offset, offset + size, set()
    while position + 9 <= end and bytes(raw[position : position + 2]) in BLOCK_TAGS:
        tags.add(BLOCK_TAGS[bytes(raw[position : position + 2])])
        position += 9 + int(raw[position + 3]) + (int(raw[position + 4]) << 8) + (int(raw[position + 5]) << 16)
    if tags and position in (end, end - PAGE_CHECKSUM_BYTES) and len(tags) == 1:
        return tags.pop()
    return "stored"


def rntuple_page_codecs(opened, name: str) -> dict[str, int]:
    """How many pages of the RNTuple NAME of the file OPENED (uproot, memory-mapped) carry each algorithm ("stored":
    none), read from the pages' own bytes at the locators of its page lists."""
    raw = transcode.whole(opened).raw_data
    counts: dict[str, int] = {}
    for cluster in opened[name].page_link_list:
        for column in cluster:
            for page in column.pages:
                codec = _page_codec(raw, page.locator.offset, page.locator.num_bytes)
                counts[codec] = counts.get(codec, 0) + 1
    return counts


def _rntuple_codec_differs(name: str, copy, codec: Codec) -> str | None:
    """How the RNTuple NAME of COPY fails to carry CODEC: pages left in another algorithm, or None."""
    other = {k: n for k, n in rntuple_page_codecs(copy, name).items() if k not in (codec.name, "stored")}
    if other:
        return (
            f"{name}: {sum(other.values())} RNTuple pages are not {codec.name} in the copy "
            f"({', '.join(f'{n} {k}' for k, n in sorted(other.items()))}): this ROOT's hadd did not recompress "
            f"them"
        )
    return None


def _members(obj) -> object:
    """OBJ's members as plain values (for comparison), TObject's runtime bits left out."""
    members = getattr(obj, "all_members", None)
    if members is None:
        return np.asarray(obj).tolist() if isinstance(obj, np.ndarray) else obj
    return {k: _members(v) for k, v in members.items() if k not in RUNTIME_MEMBERS}


def _differences(name: str, a, b) -> str | None:
    """How A and B (source, copy) differ, in a few words, or None."""
    if a == b:
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in b:
                return f"{name}: {k} missing from the copy"
            if k not in a:
                return f"{name}: {k} only in the copy"
            said = _differences(f"{name}/{k}", a[k], b[k])
            if said:
                return said
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            said = _differences(f"{name}/{x.get('name', i) if isinstance(x, dict) else i}", x, y)
            if said:
                return said
    return f"{name}: {str(a)[:120]} in the source, {str(b)[:120]} in the copy"


def open_local(path: Path):
    """The local ROOT file PATH open in uproot, memory-mapped (fsspec, uproot's default, opens the file again for every
    read: seconds over the thousands of baskets of a NanoAOD file)."""
    return uproot.open(path, handler=uproot.MemmapSource)


def _keys_differ(src, copy) -> str | None:
    """How the keys of SRC and COPY (open files) differ in class or title, or None."""
    classes, copy_classes = src.classnames(cycle=False), copy.classnames(cycle=False)
    return _differences("keys", classes, copy_classes) or _differences(
        "titles", {k: src.key(k).fTitle for k in classes}, {k: copy.key(k).fTitle for k in copy_classes}
    )


def _verbatim_differs(name: str, src, copy) -> str | None:
    """How the tree NAME copied as it is differs in COPY from the one in SRC (open files): shape, then decompressed
    baskets."""
    ours, theirs = src[name], copy[name]
    return _differences(name, _tree_shape(ours), _tree_shape(theirs)) or _differences(
        name, _raw_baskets(ours, transcode.whole(src)), _raw_baskets(theirs, transcode.whole(copy))
    )


def verify(source: str, src, tmp: Path, what: Plan, codec: Codec) -> dict[str, int]:
    """{tree or RNTuple: entries} after checking hadd's copy at TMP against the staged source, open as SRC (see the
    module's docstring), and that every page of its RNTuples is compressed with CODEC or stored as it is;
    RecompressError naming the first difference otherwise."""
    entries = {}
    with open_local(tmp) as copy:
        said = _keys_differ(src, copy)
        for name in what.recompressed_trees:
            if said:
                break
            theirs = copy[name]
            shape = _tree_shape(what.opened[name])
            said = _differences(name, shape, _tree_shape(theirs))
            names = list(shape["branches"])
            said = said or _differences(
                name, _branch_checksums(what.opened[name], names), _branch_checksums(theirs, names)
            )
            entries[name] = shape["entries"]
        for name in what.verbatim_trees:
            said = said or _verbatim_differs(name, src, copy)
            entries[name] = copy[name].num_entries
        for name in what.rntuples:
            if said:
                break
            said = _rntuple_codec_differs(name, copy, codec)  # first: it reads no values
            if said:
                break
            values = _rntuple_values(src[name])
            said = _differences(name, values, _rntuple_values(copy[name]))
            entries[name] = values["entries"]
        for name in what.objects:
            said = said or _differences(name, _members(src[name]), _members(copy[name]))
    if said:
        raise RecompressError(f"{source}: the copy differs from the source: {said}")
    return entries


def verify_transcoded(source: str, src, tmp: Path, manifest: dict) -> dict[str, int]:
    """{tree: entries} after checking the transcoder's copy at TMP against its MANIFEST of the staged source, open as
    SRC (see the module's docstring); RecompressError naming the first difference otherwise."""
    entries = {}
    keys = manifest["keys"]
    with open_local(tmp) as copy:
        said = _differences(
            "keys the transcoder copied", sorted(src.classnames(cycle=False)), sorted(keys)
        ) or _keys_differ(src, copy)
        for name, described in keys.items():
            if said:
                break
            if described["kind"] == "transcode":
                said = _differences(name, described, transcode.described(copy, name, transcode.whole(copy)))
                entries[name] = described["entries"]
            else:
                said = _differences(name, _members(src[name]), _members(copy[name]))
    if said:
        raise RecompressError(f"{source}: the copy differs from the source: {said}")
    return entries


def _unreadable(source: str, e: Exception) -> Exception:
    """The staged source could not be read (E): the source was read whole onto local disk, so a file uproot cannot
    read is a permanent problem of the file (damaged, not ROOT), named by its own path: no network is to blame. A
    copy cut short or empty (``failures``' ``truncated``) is said as ``fetch.CutShort``: the file's next source may
    have it whole."""
    failure = failures.classify(e)
    cause = f"{source}: cannot be read as a ROOT file: {failures.first_line(e)}"
    if failure is not None and failure.kind == "truncated":
        return fetch.CutShort(cause)
    kind, fix = (
        (failure.kind, failure.fix)
        if failure and failure.failure_class == records.PERMANENT
        else (
            "corrupt",
            "the file is damaged or truncated at its source: replace it there; " + records.RERUN_FIXED,
        )
    )
    return FileProblem(kind, cause, fix)


READ_ERRORS = (OSError, ValueError, uproot.deserialization.DeserializationError)


def _local(e: Exception) -> bool:
    """Whether E is the local disk's (full, gone): not the file's fault."""
    return isinstance(e, OSError) and e.errno is not None


@contextlib.contextmanager
def _opened(source: str, staged: Path):
    """The staged source open (its keys read)."""
    try:
        src = open_local(staged)
        src.classnames(cycle=False)
    except READ_ERRORS as e:
        if _local(e):
            raise
        raise _unreadable(source, e) from e
    with src:
        yield src


def _planned(source: str, src) -> Plan:
    """hadd's plan for the open source SRC."""
    try:
        return plan(src)
    except READ_ERRORS as e:
        if _local(e):
            raise
        raise _unreadable(source, e) from e


def _staged_path(destination: Path) -> Path:
    return destination.with_name(destination.name + ".source")


def remove_leftovers(destination: Path) -> None:
    """What a recompression of DESTINATION that was killed leaves beside it: the staged source and the temporary
    copy (atomic.replacing's ``.<name>.*``, with write_copy's ``.verbatim`` part)."""
    for leftover in [_staged_path(destination), *destination.parent.glob(f".{destination.name}.*")]:
        leftover.unlink(missing_ok=True)


@contextlib.contextmanager
def _staged(destination: Path):
    local = _staged_path(destination)
    try:
        yield local
    finally:
        local.unlink(missing_ok=True)


def _copy(source: str, src, staged: Path, tmp: Path, codec: Codec) -> tuple[dict[str, int], dict]:
    """Copy STAGED (open as SRC) to TMP with the transcoder, or with hadd when the transcoder does not copy what the
    file holds or fails on it (a damaged file then fails in hadd too); returns ({tree: entries}, {"engine": ...,
    "fallback": why hadd}) once the copy is verified."""
    try:
        manifest = transcode.run(staged, tmp, codec.setting)
    except (transcode.Unsupported, transcode.TranscodeError) as e:
        what = _planned(source, src)
        write_copy(staged, tmp, what, codec, source)
        how = {"engine": "hadd", "fallback": str(e)}
        if what.verbatim_trees:
            how["kept_codec"] = {name: KEPT_BY_ROOTCP for name in what.verbatim_trees}
        return verify(source, src, tmp, what, codec), how
    return verify_transcoded(source, src, tmp, manifest), {"engine": "transcode"}


def start() -> None:
    """Check and start what recompression needs, before any file is read: ROOT's programs (a missing ROOT fails the
    job, not the file), the transcoder built and running (one program for all the files of a job: ROOT starts once).
    A job calls it before each file's process forks: the children use the running transcoder."""
    root_program("hadd")
    transcode.SHARED.start()


def recompress(source: str, destination: Path, codec: Codec, report: dict | None = None) -> tuple[dict[str, int], int]:
    """Copy SOURCE to DESTINATION recompressed with CODEC; returns ({tree: entries}, bytes read from SOURCE). REPORT,
    if given, receives the engine that copied it ("transcode" or "hadd"), for hadd why ("fallback") and what kept
    its old codec ("kept_codec"), and the source's UUID ("source_uuid")."""
    destination = Path(destination)
    start()
    with _staged(destination) as staged:
        nbytes = stage(source, staged)
        with _opened(source, staged) as src, atomic.replacing(destination) as tmp:
            entries, how = _copy(source, src, staged, tmp, codec)
            how["source_uuid"] = file_uuid(src)  # the copy has a UUID of its own; the analysis is told the source's
    if report is not None:
        report.update(how)
    return entries, nbytes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hepvine recompress", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="input file (local path or root:// URL)")
    parser.add_argument("destination", type=Path)
    parser.add_argument("--codec", default="zstd:5", help="<codec>:<level>, e.g. zstd:5 (default)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    how = {}
    try:
        entries, nbytes = recompress(args.source, args.destination, parse_codec(args.codec), how)
    except (OSError, FileProblem, RootMissing, transcode.BuildError) as e:
        print(f"recompress: {args.source}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - started
    print(
        f"recompress: {args.source} → {args.destination} ({args.codec}): {nbytes:,} → "
        f"{args.destination.stat().st_size:,} bytes in {seconds:.2f} s ({nbytes / 1e6 / seconds:.1f} MB/s) by "
        + (how["engine"] + (f" (the transcoder does not copy it: {how['fallback']})" if "fallback" in how else ""))
        + "; "
        + ", ".join(f"{k} {v} entries" for k, v in entries.items()),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
