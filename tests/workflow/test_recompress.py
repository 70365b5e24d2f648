"""Recompression: the ZSTD copy of a generated LZMA file has every tree and branch, the same entries and identical
values, and is smaller than 1.3x the source; a file with non-TTree objects is refused, naming them."""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest
import uproot

from hepvine import generate, recompress


def test_zstd_copy_equals_source(tmp_path):
    src = generate.write_file(tmp_path / "src.root", "ttbar", 5000, index=0, seed=11)["path"]
    dst = tmp_path / "copy.root"
    entries, nbytes = recompress.recompress(src, dst, recompress.parse_codec("zstd:5"))
    assert entries == {"Events": 5000, "LuminosityBlocks": 5, "Runs": 1}
    assert nbytes >= 0.9 * (tmp_path / "src.root").stat().st_size  # every branch is read
    assert not (tmp_path / "copy.root.partial").exists()
    with uproot.open(src) as a, uproot.open(dst) as b:
        assert b.file.compression.__class__.__name__ == "ZSTD"
        for tree in ("Events", "LuminosityBlocks", "Runs"):
            assert set(a[tree].keys()) == set(b[tree].keys())
            for name in a[tree].keys():  # compared here independently of the checksums inside recompress
                assert ak.to_list(a[tree][name].array()) == ak.to_list(b[tree][name].array()), (tree, name)
        assert b["Events"]["nJet"].typename in ("int32_t", "uint32_t")
    assert dst.stat().st_size <= 1.3 * (tmp_path / "src.root").stat().st_size


def test_non_ttree_objects_are_refused_by_name(tmp_path):
    path = tmp_path / "with_hist.root"
    with uproot.recreate(path) as f:
        f.mktree("Events", {"x": np.float32})
        f["Events"].extend({"x": np.arange(10, dtype=np.float32)})
        f["calibration"] = np.histogram(np.arange(10), bins=5)
    with pytest.raises(recompress.RecompressError, match=r"calibration \(TH1D\)"):
        recompress.recompress(str(path), tmp_path / "out.root", recompress.parse_codec("zstd:5"))
    assert not (tmp_path / "out.root").exists()


def test_codec_spelling():
    with pytest.raises(recompress.RecompressError, match="e.g. zstd:5"):
        recompress.parse_codec("brotli")
