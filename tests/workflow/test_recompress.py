"""Recompression keeps every object of real CMSSW NanoAOD (../shared/nanoaod: Run 2 and 3, MC and data, TTree and
RNTuple, `tag`, MetaData/ParameterSets, counter-only branches, unsigned counters, titles): checked here independently
of the module's own verification, with uproot and with ROOT; generated files and histograms too; the basket
transcoder copies every TTree file it supports (every compressible basket ZSTD) and hadd the rest, saying why; the
transcoder's verification catches a copy that differs; bad input is a permanent failure of the file; a missing ROOT
or compiler says how to install it."""

from __future__ import annotations

import collections
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import uproot

from hepvine.devtools import generate
from hepvine.model import records
from hepvine.reading import failures
from hepvine.work import processor, recompress, transcode

NANOAOD = Path(__file__).resolve().parents[2].parent / "shared" / "nanoaod"
REAL_FILES = sorted(NANOAOD.glob("*.root"))
# ROOT's compression header of a basket starts with the algorithm's two letters.
ALGORITHMS = {b"ZS": "zstd", b"XZ": "lzma", b"ZL": "zlib", b"L4": "lz4", b"CS": "zlib"}
# The real files hadd copies, and why: RNTuple, and the AGC sample's baskets kept inside its TTree's record.
HADD_COPIES = {
    "cmsopendata2015_ttbar_19980_NANOAOD_RNTupleImporter_rntuple_v1-0-0-1.root": "ROOT::RNTuple",
    "nano_dy_rntuple.root": "ROOT::RNTuple",
    "nanoAOD_2015_CMS_Open_Data_ttbar.root": "inside the tree's record",
}


def test_the_real_files_are_there():
    """CI runs with ../shared beside the checkout: without it the real-file tests below would test nothing."""
    assert len(REAL_FILES) >= 11, f"expected the real NanoAOD files in {NANOAOD}"


def baskets(path: Path, tree: str) -> list[tuple[int, str]]:
    """(seek, algorithm) of each of TREE's baskets: 'none' when stored as it is, seek 0 and 'embedded' when kept
    inside the tree's record."""
    raw = path.read_bytes()
    found = []
    with uproot.open(path) as f:
        for branch in f[tree].branches:
            for seek in branch.member("fBasketSeek")[: branch.num_baskets]:
                if seek == 0:
                    found.append((0, "embedded"))
                    continue
                nbytes, objlen = struct.unpack(">iHi", raw[seek : seek + 10])[::2]
                keylen = struct.unpack(">H", raw[seek + 14 : seek + 16])[0]
                compressed = nbytes - keylen < objlen
                found.append(
                    (int(seek), ALGORITHMS.get(raw[seek + keylen : seek + keylen + 2], "?") if compressed else "none")
                )
    return found


def basket_codecs(path: Path, tree: str) -> collections.Counter:
    """How many of TREE's baskets are compressed with each algorithm ('none': stored, 'embedded': in the record)."""
    return collections.Counter(codec for _, codec in baskets(path, tree))


def equal_values(a, b) -> bool:
    return ak.array_equal(a, b, equal_nan=True, dtype_exact=True, check_parameters=False)


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> dict:
    """Each real file recompressed once for this module's tests: name → (its entries, bytes read, the copy, how)."""
    where = tmp_path_factory.mktemp("copies")
    made = {}
    for source in REAL_FILES:
        copy, how = where / source.name, {}
        made[source.name] = (
            *recompress.recompress(str(source), copy, recompress.parse_codec("zstd:5"), how),
            copy,
            how,
        )
    assert sorted(p.name for p in where.iterdir()) == sorted(made)  # nothing left beside the copies
    return made


@pytest.mark.parametrize("source", REAL_FILES, ids=[p.name for p in REAL_FILES])
def test_real_nanoaod_copy_keeps_every_object(source, copies):
    entries, nbytes, copy, _ = copies[source.name]
    assert nbytes == source.stat().st_size  # read once, whole
    with uproot.open(source) as a, uproot.open(copy) as b:
        classes = a.classnames(cycle=False)
        assert b.classnames(cycle=False) == classes
        assert {k: b.key(k).fTitle for k in classes} == {k: a.key(k).fTitle for k in classes}
        if "tag" in classes:
            assert str(b["tag"]) == str(a["tag"])
        for name, cls in classes.items():
            if cls == "ROOT::RNTuple":
                assert entries[name] == b[name].num_entries == a[name].num_entries
                assert equal_values(a[name].arrays(), b[name].arrays())
            if cls != "TTree":
                continue
            ta, tb = a[name], b[name]
            assert entries[name] == tb.num_entries == ta.num_entries
            assert tb.keys() == ta.keys()
            described = [{k: (v.title, v.typename) for k, v in t.items()} for t in (ta, tb)]
            assert described[1] == described[0]
            codecs = basket_codecs(copy, name)
            if name in ("MetaData", "ParameterSets"):  # framework classes, no dictionary here: the same baskets, ZSTD
                assert set(codecs) <= {"zstd", "none"}, codecs
                for branch in ta.branches:
                    assert [bytes(branch.basket(i).data) for i in range(branch.num_baskets)] == [
                        bytes(tb[branch.name].basket(i).data) for i in range(tb[branch.name].num_baskets)
                    ]
                continue
            assert set(codecs) <= {"zstd", "none", "embedded"}, codecs  # every compressed basket is ZSTD now
            if name == "Events":
                assert codecs["zstd"] > 0
            assert equal_values(ta.arrays(library="ak"), tb.arrays(library="ak"))
        if "Events" in classes and classes["Events"] == "TTree":
            counters = {
                k: v.typename for k, v in a["Events"].items() if k.startswith("n") and v.typename.endswith("_t")
            }
            assert {k: b["Events"][k].typename for k in counters} == counters  # uint32_t stays unsigned


@pytest.mark.parametrize("name", ["pfnano.root", "ttH_M125_2017.root", "nano_dy_rntuple.root"])
def test_root_opens_the_copy_with_every_object(name, copies):
    entries, _, copy, _ = copies[name]
    script = (
        "import sys, ROOT\n"
        "f = ROOT.TFile.Open(sys.argv[1])\n"
        "assert f and not f.IsZombie()\n"
        "print('setting', f.GetCompressionSettings())\n"
        "for key in f.GetListOfKeys():\n"
        "    cls = key.GetClassName()\n"
        "    if cls == 'ROOT::RNTuple':\n"
        "        n = ROOT.RNTupleReader.Open(key.GetName(), sys.argv[1]).GetNEntries()\n"
        "    else:\n"
        "        obj = key.ReadObj()\n"
        "        n = obj.GetEntries() if cls == 'TTree' else obj.GetString().Data()\n"
        "    print(key.GetName(), cls, n)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(copy)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines.pop("setting") == "505"
    with uproot.open(NANOAOD / name) as source:
        expected = {
            k: f"{cls} {entries[k] if k in entries else str(source[k])}"
            for k, cls in source.classnames(cycle=False).items()
        }
    assert lines == expected


def zstd_would_not_shrink(path: Path, seek: int) -> bool:
    """Whether the basket stored uncompressed at SEEK of PATH would not be smaller in ZSTD (ROOT then stores it as it
    is, and so does the transcoder); another zstd build (uproot's) frames it up to ~10 bytes differently."""
    raw = path.read_bytes()
    nbytes, objlen = struct.unpack(">iHi", raw[seek : seek + 10])[::2]
    keylen = struct.unpack(">H", raw[seek + 14 : seek + 16])[0]
    return len(uproot.ZSTD(5).compress(raw[seek + keylen : seek + nbytes])) >= objlen - 16


@pytest.mark.parametrize("source", REAL_FILES, ids=[p.name for p in REAL_FILES])
def test_the_transcoder_copies_every_ttree_file_it_supports(source, copies):
    """The basket transcoder, not the hadd fallback, copied each real TTree file it supports; every basket of its
    trees (CMSSW's MetaData and ParameterSets too) is ZSTD, or stored as it is where ZSTD would not shrink it; the
    others went to hadd, and why."""
    _, _, copy, how = copies[source.name]
    if source.name in HADD_COPIES:
        assert how["engine"] == "hadd" and HADD_COPIES[source.name] in how["fallback"], how
        return
    with uproot.open(source) as f:  # the analysis is told the source's UUID, not the copy's own
        assert how == {"engine": "transcode", "source_uuid": processor.file_uuid(f)}
    with uproot.open(copy) as f:
        trees = [name for name, cls in f.classnames(cycle=False).items() if cls == "TTree"]
    assert "Events" in trees
    for name in trees:
        found = baskets(copy, name)
        assert {codec for _, codec in found} <= {"zstd", "none"}, (name, collections.Counter(c for _, c in found))
        assert all(zstd_would_not_shrink(copy, seek) for seek, codec in found if codec == "none")


def file_records(path: Path):
    """(seek, class, name, codec) of every record of the ROOT file at PATH, walked from its first record to its end
    as ROOT lays them out (a key header, then its payload; a negative size is a gap), read from the bytes alone:
    codec "stored" when the payload is as long as the object, else the algorithm its first block names."""
    raw = path.read_bytes()
    assert raw[:4] == b"root", path
    version, begin = struct.unpack_from(">ii", raw, 4)
    (end,) = struct.unpack_from(">q" if version >= 1_000_000 else ">i", raw, 12)
    seek = begin
    while seek < end:
        (nbytes,) = struct.unpack_from(">i", raw, seek)
        if nbytes < 0:  # a gap left by a record ROOT freed
            seek -= nbytes
            continue
        assert nbytes > 0, f"{path}: a record of no bytes at {seek}"
        key_version, objlen, _, keylen = struct.unpack_from(">hiIh", raw, seek + 4)
        at = seek + 18 + (16 if key_version > 1000 else 8)  # past the cycle and the two seeks
        strings = []
        for _ in range(2):  # class name, object name
            size, at = raw[at], at + 1
            if size == 255:
                (size,), at = struct.unpack_from(">i", raw, at), at + 4
            strings.append(raw[at : at + size].decode(errors="replace"))
            at += size
        head = raw[seek + keylen : seek + keylen + 2]
        codec = "stored" if nbytes - keylen == objlen else ALGORITHMS.get(head, f"unknown {head!r}")
        yield seek, strings[0], strings[1], codec
        seek += nbytes


@pytest.mark.parametrize("source", REAL_FILES, ids=[p.name for p in REAL_FILES])
def test_every_record_of_every_copy_is_in_the_new_codec(source, copies):
    """Every record of each copy -- each basket of every tree (CMSSW's ParameterSets and MetaData too), each tree's
    record, each object, the list of classes, the RNTuple's blobs -- is ZSTD or stored, counted by walking the copy's
    bytes, independently of the transcoder's manifest and of hadd's check; the walk finds the sources' LZMA."""
    _, _, copy, how = copies[source.name]
    found = collections.Counter(codec for *_, codec in file_records(copy))
    assert set(found) <= {"zstd", "stored"} and found["zstd"] > 0, (found, how)
    assert "kept_codec" not in how
    if source.name == "pfnano.root":  # the file the issue was found on: 352 LZMA records used to stay
        assert collections.Counter(codec for *_, codec in file_records(source))["lzma"] > 600
        parameter_sets = [codec for _, _, name, codec in file_records(copy) if name == "IdToParameterSetsBlobs"]
        assert len(parameter_sets) == 351 and set(parameter_sets) <= {"zstd", "stored"}


@pytest.mark.parametrize("source", REAL_FILES, ids=[p.name for p in REAL_FILES])
def test_the_checks_record_reader_reads_what_uproot_reads(source, copies, monkeypatch):
    """The check reads each transcoded tree's record itself (uproot's whole reading of a 1,600-branch tree costs over
    10x more) and digests its baskets in batches: on every real file it gives what uproot gives, without falling back
    to uproot, whatever the batches' size; a record it does not read goes to uproot, with the same result."""
    _, _, copy, how = copies[source.name]
    if how["engine"] != "transcode":
        return
    with recompress.open_local(copy) as f:
        chunk = transcode.whole(f)
        trees = [
            name
            for name, cls in f.classnames(cycle=False).items()
            if cls == "TTree" and name not in ("MetaData", "ParameterSets")
        ]
        by_uproot = {name: transcode.described_by_uproot(f[name], chunk) for name in trees}
        assert by_uproot["Events"]["branches"] and not any(
            b["sha256"].startswith("unreadable") for b in by_uproot["Events"]["branches"]
        )
        with monkeypatch.context() as patched:
            patched.setattr(transcode, "described_by_uproot", None)  # no fallback
            assert {name: transcode.described(f, name, chunk) for name in trees} == by_uproot
            # The baskets' digests come from batches of many branches (one zstd call each): small batches, and
            # branches larger than a batch (read alone), give the same.
            patched.setattr(transcode, "BATCH_BYTES", 4096)
            assert {name: transcode.described(f, name, chunk) for name in trees} == by_uproot

        def unparsed(self):
            raise transcode._Unparsed("this test's")

        monkeypatch.setattr(transcode._TreeRecord, "tree", unparsed)
        assert transcode.described(f, "Events", chunk) == by_uproot["Events"]


def test_the_transcoders_check_finds_a_copy_that_differs(tmp_path):
    """The copy is checked against the source's manifest: a basket's bytes, a leaf's type or an entry count that
    differ are named."""
    source = NANOAOD / "ttH_M125_2017.root"
    copy = tmp_path / "copy.root"
    manifest = transcode.run(source, copy, 505)
    with uproot.open(source) as src:
        assert recompress.verify_transcoded(str(source), src, copy, manifest)["Events"] == 100
        branches = manifest["keys"]["Events"]["branches"]
        jet_pt = next(b for b in branches if b["name"] == "Jet_pt")
        for change, said in [
            (("sha256", "0" * 64), "Events/branches/Jet_pt/sha256"),
            (("leaves", [[*jet_pt["leaves"][0][:5], True, *jet_pt["leaves"][0][6:]]]), "Events/branches/Jet_pt/leaves"),
            (("entries", 99), "Events/branches/Jet_pt/entries"),
        ]:
            altered = json.loads(json.dumps(manifest))
            next(b for b in altered["keys"]["Events"]["branches"] if b["name"] == "Jet_pt")[change[0]] = change[1]
            with pytest.raises(recompress.RecompressError, match=said):
                recompress.verify_transcoded(str(source), src, copy, altered)


def test_the_transcoders_check_reads_the_copys_own_bytes(tmp_path):
    """The check reads the copy's baskets from its bytes: a byte changed inside one compressed basket of the copy
    (the manifest as the transcoder printed it) is named, whether the basket still decompresses or not."""
    source = NANOAOD / "ttH_M125_2017.root"
    copy = tmp_path / "copy.root"
    manifest = transcode.run(source, copy, 505)
    with uproot.open(copy) as f:
        branch = f["Events"]["Jet_pt"]
        seek, size = int(branch.member("fBasketSeek")[0]), int(branch.member("fBasketBytes")[0])
    raw = bytearray(copy.read_bytes())
    keylen = struct.unpack(">H", raw[seek + 14 : seek + 16])[0]
    assert raw[seek + keylen : seek + keylen + 2] == b"ZS"
    with uproot.open(source) as src:
        for offset in (keylen + 9 + (size - keylen - 9) // 2, size - 1):  # inside the block, its last byte
            altered = tmp_path / f"altered-{offset}.root"
            changed = bytearray(raw)
            changed[seek + offset] ^= 0x5A
            altered.write_bytes(changed)
            with pytest.raises(recompress.RecompressError, match="Events/branches/Jet_pt/sha256"):
                recompress.verify_transcoded(str(source), src, altered, manifest)


def test_rntuple_pages_carry_the_new_codec(tmp_path):
    """An RNTuple in LZMA (made from a real one by ROOT) is copied by hadd with every page ZSTD or stored, read from
    the pages' bytes; a copy whose pages kept LZMA (an engine that did not recompress them) is refused, saying so."""
    lzma = tmp_path / "rntuple_lzma.root"
    subprocess.run(
        [recompress.root_program("hadd"), "-f209", str(lzma), str(NANOAOD / "nano_dy_rntuple.root")],
        check=True,
        capture_output=True,
    )
    with recompress.open_local(lzma) as f:
        assert recompress.rntuple_page_codecs(f, "Events").get("lzma", 0) > 100
    copy, how = tmp_path / "copy.root", {}
    entries, _ = recompress.recompress(str(lzma), copy, recompress.parse_codec("zstd:5"), how)
    assert how["engine"] == "hadd" and entries["Events"] == 40
    with recompress.open_local(copy) as f:
        codecs = recompress.rntuple_page_codecs(f, "Events")
    assert set(codecs) == {"zstd", "stored"} and codecs["zstd"] > 100, codecs
    raw = copy.read_bytes()
    with uproot.open(copy) as f:  # independently of the helper: the first bytes of every page
        heads = collections.Counter(
            raw[page.locator.offset : page.locator.offset + 2]
            for cluster in f["Events"].page_link_list
            for column in cluster
            for page in column.pages
        )
    assert heads[b"ZS"] == codecs["zstd"] and heads[b"XZ"] == 0
    kept = tmp_path / "kept.root"  # what an engine that copied the pages as they are would leave: the same values
    shutil.copyfile(lzma, kept)
    said = r"Events: \d+ RNTuple pages are not zstd in the copy \(\d+ lzma"
    with recompress.open_local(lzma) as src, pytest.raises(recompress.RecompressError, match=said):
        recompress.verify(str(lzma), src, kept, recompress.plan(src), recompress.parse_codec("zstd:5"))


def test_generated_file_and_histogram(tmp_path):
    """hepvine's own generated files (the demo's) and objects such as histograms are copied too."""
    src = Path(
        generate.write_file(tmp_path / "src.root", "ttbar", 5000, index=0, seed=11, compression=uproot.LZMA(9))["path"]
    )
    with uproot.update(src) as f:
        f["calibration"] = np.histogram(np.arange(10), bins=5)
    copy = tmp_path / "copy.root"
    how = {}
    entries, _ = recompress.recompress(str(src), copy, recompress.parse_codec("zstd:5"), how)
    assert entries == {"Events": 5000, "LuminosityBlocks": 5, "Runs": 1}
    assert how["engine"] == "transcode" and "fallback" not in how
    with uproot.open(src) as a, uproot.open(copy) as b:
        assert b["calibration"].values().tolist() == a["calibration"].values().tolist()
        assert equal_values(a["Events"].arrays(), b["Events"].arrays())
    assert set(basket_codecs(copy, "Events")) <= {"zstd", "none"}
    assert copy.stat().st_size <= 1.3 * src.stat().st_size


def test_a_truncated_file_is_a_permanent_failure_and_leaves_nothing(tmp_path):
    bad = tmp_path / "truncated.root"
    bad.write_bytes((NANOAOD / "ttH_M125_2017.root").read_bytes()[:200_000])
    with pytest.raises(Exception) as caught:
        recompress.recompress(str(bad), tmp_path / "out.root", recompress.parse_codec("zstd:5"))
    failure = failures.classify(caught.value)
    assert failure is not None and failure.failure_class == records.PERMANENT, caught.value
    assert sorted(p.name for p in tmp_path.iterdir()) == ["truncated.root"]


def unsupported(*args):
    raise transcode.Unsupported("a file the transcoder leaves to hadd (this test's)")


def test_hadd_on_a_full_disk_is_a_transient_failure(monkeypatch, tmp_path):
    """ROOT's own failure blames the file, except a full disk, which is the worker's and is retried."""
    fake = tmp_path / "hadd"
    fake.write_text(
        "#!/bin/sh\necho 'SysError in <TFile::WriteBuffer>: error writing to file (No space left on "
        "device)' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(recompress, "root_program", lambda name: str(fake))
    monkeypatch.setattr(transcode, "run", unsupported)
    with pytest.raises(OSError) as caught:
        recompress.recompress(
            str(NANOAOD / "nano_dimuon.root"), tmp_path / "out.root", recompress.parse_codec("zstd:5")
        )
    failure = failures.classify(caught.value)
    assert (failure.kind, failure.failure_class) == ("disk-full", records.TRANSIENT)
    assert not (tmp_path / "out.root").exists()


def test_missing_root_names_the_extra(monkeypatch):
    monkeypatch.setattr(recompress.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(recompress.shutil, "which", lambda name: None)
    with pytest.raises(recompress.RootMissing, match=r"hepvine\[recompress\]"):
        recompress.root_program("hadd")
    assert failures.classify(recompress.RootMissing("x")) is None  # the job fails: no file is to blame


def test_missing_compiler_names_the_packages(monkeypatch):
    monkeypatch.setattr(transcode.shutil, "which", lambda name: None)
    with pytest.raises(transcode.BuildError, match="g\\+\\+.*libc6-dev"):
        transcode.compiler()
    assert failures.classify(transcode.BuildError("x")) is None  # the job fails: no file is to blame


def test_codec_spelling():
    assert recompress.parse_codec("zstd:5").setting == 505
    assert recompress.parse_codec("lzma:9").setting == 209
    for bad in ("brotli", "zstd", "zstd:10", "zstd:x"):
        with pytest.raises(recompress.RecompressError, match="e.g. zstd:5"):
            recompress.parse_codec(bad)


def test_a_basket_table_pointing_outside_the_copy_is_named_not_raised(tmp_path):
    """A branch whose basket table points past the end of the copy, or at bytes that are not its key, gives an
    ``unreadable`` digest naming the basket (the copy then differs from the manifest), in a batch with sound ones."""
    copy = tmp_path / "copy.root"
    transcode.run(NANOAOD / "nano_dy.root", copy, 505)
    with recompress.open_local(copy) as f:
        chunk = transcode.whole(f)
        branch = f["Events"]["Jet_pt"]
        sound = (branch.member("fBasketSeek"), branch.member("fBasketBytes"), branch.num_baskets)
        digests = transcode.basket_digests(
            [sound, (np.array([10**12]), np.array([100]), 1), (np.array([0]), np.array([100]), 1), sound], chunk
        )
        assert digests[0] == digests[3] == transcode.basket_digest(*sound, chunk)  # while the file is open
    assert digests[1].startswith("unreadable: basket 0 at byte 1000000000000") and digests[2].startswith("unreadable")
