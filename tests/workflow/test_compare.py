"""``hepvine compare``: byte-identical histograms compare identical (exit 0) even when their ROOT files' bytes differ
(timestamps, UUIDs); one changed bin, variance, axis or missing histogram is named with its histogram and bin (exit
1); a product that cannot be read exits 2 naming it. On merged-result pickles (every histogram of the analysis's output,
by its path in the output, and the events per dataset) and on histograms.root files."""

from __future__ import annotations

import numpy as np
import pytest
import uproot

from hepvine.commands import cli, compare
from hepvine.examples import agc as analysis
from hepvine.model import atomic
from hepvine.products import output


def merged(shift: float = 0.0, weight: float = 1.5) -> dict:
    """A merged result whose analysis output is one histogram with category axes, ``output["hist"]`` (as
    hepvine.jobs.merge writes it); SHIFT changes the weights of region 4j2b only."""
    h = analysis.new_histogram()
    rng = np.random.default_rng(7)
    for process in ("ttbar", "data"):
        values = rng.uniform(50, 550, 400)
        h.fill(region="4j1b", process=process, variation="nominal", observable=values, weight=np.full(400, weight))
        h.fill(
            region="4j2b",
            process=process,
            variation="pt_scale_up",
            observable=values,
            weight=np.full(400, weight + shift),
        )
    return {"records": [], "output": {"hist": h}, "events": {"ttbar__nominal": 400, "data__nominal": 400}}


def write(tmp_path, name: str, result: dict, as_root: bool):
    """RESULT as a result pickle, or AS_ROOT as a results directory whose histograms.root holds its histogram's 1-D
    slices under the AGC processor's names (``<region>_<process>_<variation>``), as
    hepvine.products.output writes them."""
    if as_root:
        directory = tmp_path / name
        h = result["output"]["hist"]
        flat = {
            f"{r}_{p}_{v}": h[{"region": r, "process": p, "variation": v}]
            for r in analysis.REGIONS
            for p in ("data", "ttbar")
            for v in analysis.SYSTEMATICS[:2]
        }
        directory.mkdir()
        assert output.write_root(flat, directory / "histograms.root")["skipped"] == {}
        return directory
    atomic.write_pickle(tmp_path / f"{name}.pkl", result)
    return tmp_path / f"{name}.pkl"


@pytest.mark.parametrize("as_root", [False, True])
def test_identical_contents_compare_identical(tmp_path, capsys, as_root):
    a, b = write(tmp_path, "a", merged(), as_root), write(tmp_path, "b", merged(), as_root)
    if as_root:  # the files differ (UUID, times), their histograms do not
        assert (a / "histograms.root").read_bytes() != (b / "histograms.root").read_bytes()
    assert cli.main(["compare", str(a), str(b)]) == 0
    assert capsys.readouterr().out.startswith("identical:")


def test_one_changed_bin_is_named_in_a_pickle(tmp_path, capsys):
    changed = merged()
    # region 4j1b, process data (filled second), variation nominal, observable bin 7
    view = changed["output"]["hist"].view()
    view.value[0, 1, 0, 7], view.variance[0, 1, 0, 7] = 3.0, 2.0
    a, b = write(tmp_path, "a", merged(), False), write(tmp_path, "b", changed, False)
    assert compare.main([str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(
        "different: histogram hist, region='4j1b', process='data', variation='nominal', "
        "observable bin 7 [190, 210): content"
    ), out
    assert "against 3.0" in out and "(1 bin(s) differ)" in out


def test_one_changed_bin_is_named_in_histograms_root(tmp_path, capsys):
    a, b = write(tmp_path, "a", merged(), True), write(tmp_path, "b", merged(shift=1e-9), True)
    assert compare.main([str(a), str(b)]) == 1
    out = capsys.readouterr().out
    # The first histogram in name order whose bins differ: 4j2b_data_pt_scale_up (only 4j2b's weights were shifted).
    assert out.startswith("different: histogram 4j2b_data_pt_scale_up, "), out
    assert " bin " in out and ": content " in out


def test_a_variance_alone_differs(tmp_path, capsys):
    changed = merged()
    view = changed["output"]["hist"].view(flow=True)
    view.variance[0, 0, 0, 3] += 1e-12
    a, b = write(tmp_path, "a", merged(), False), write(tmp_path, "b", changed, False)
    assert compare.main([str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "observable bin 2 [" in out and ": variance " in out, out  # flow index 3 is bin 2 (after the underflow)


def test_the_last_bit_counts(tmp_path):
    a, b = merged(), merged()
    a, b = a["output"]["hist"], b["output"]["hist"]
    b.view(flow=True).value[1, 0, 1, 5] = np.nextafter(a.view(flow=True).value[1, 0, 1, 5], 1.0)
    assert compare.compare({"h": compare.from_hist(a)}, {"h": compare.from_hist(b)}) is not None
    zero, negative_zero = merged(weight=0.0)["output"]["hist"], merged(weight=0.0)["output"]["hist"]
    negative_zero.view(flow=True).value[0, 0, 0, 0] = -0.0
    assert compare.compare({"h": compare.from_hist(zero)}, {"h": compare.from_hist(negative_zero)}) is not None


def test_missing_histogram_events_and_axes_are_named(tmp_path):
    a = merged()
    fewer = merged()
    del fewer["events"]["data__nominal"]
    assert (
        compare.compare(
            compare._from_pickle(write(tmp_path, "a", a, False)),
            compare._from_pickle(write(tmp_path, "f", fewer, False)),
        )
        == "histogram events/data__nominal only in the first"
    )
    more_events = merged()
    more_events["events"]["ttbar__nominal"] += 1
    difference = compare.compare(
        compare._from_pickle(write(tmp_path, "a", a, False)),
        compare._from_pickle(write(tmp_path, "m", more_events, False)),
    )
    assert difference.startswith("histogram events/ttbar__nominal, its value: content 400.0 against 401.0")
    other_processes = merged()
    other_processes["output"]["hist"].fill(region="4j1b", process="wjets", variation="nominal", observable=[100.0])
    difference = compare.compare(
        compare._from_pickle(write(tmp_path, "a", a, False)),
        compare._from_pickle(write(tmp_path, "o", other_processes, False)),
    )
    assert difference == "histogram hist: axis 1 ('process') has different bins or categories"


def test_a_product_that_cannot_be_read_exits_2(tmp_path, capsys):
    not_root = tmp_path / "h.root"
    not_root.write_bytes(b"not a ROOT file")
    assert compare.main([str(tmp_path / "nowhere"), str(not_root)]) == 2
    assert "nowhere: no such file or directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert compare.main([str(tmp_path / "empty"), str(not_root)]) == 2
    assert "no histograms.root in this directory" in capsys.readouterr().err
    a = write(tmp_path, "a", merged(), False)
    assert compare.main([str(a), str(not_root)]) == 2
    assert "not a ROOT file uproot can read" in capsys.readouterr().err


def test_root_objects_that_are_not_histograms_are_refused(tmp_path):
    path = tmp_path / "tree.root"
    with uproot.recreate(path) as f:
        f["Events"] = {"x": np.arange(3)}
    with pytest.raises(compare.CompareError, match="'Events' is a .*not a histogram"):
        compare.load(path)


def test_a_processors_nested_output_and_profiles_are_compared_under_their_paths(tmp_path, capsys):
    """histograms.root of a processor's nested output (directories) with a profile (Mean storage): compared by path;
    a changed bin in a directory is named by its path."""
    import hist

    def product(name: str, shift: float):
        counts = hist.Hist(hist.axis.Regular(3, 0, 3, name="x"), storage=hist.storage.Int64())
        counts.fill(x=[0.5, 1.5 + shift])
        profile = hist.Hist(hist.axis.Regular(2, 0, 2, name="x"), storage=hist.storage.Mean())
        profile.fill(x=[0.5, 1.5], sample=[2.0, 4.0])
        out = {"/DY/NANOAODSIM": {"counts": counts, "profile": profile}, "top": counts}
        path = tmp_path / name / "histograms.root"
        path.parent.mkdir()
        assert not output.write_root(out, path)["skipped"]
        return path.parent

    a, same, other = product("a", 0.0), product("same", 0.0), product("other", 1.0)
    assert compare.main([str(a), str(same)]) == 0
    assert "identical: 3 histograms" in capsys.readouterr().out
    assert compare.main([str(a), str(other)]) == 1
    assert "different: histogram _DY_NANOAODSIM/counts, xaxis bin 1 [1, 2)" in capsys.readouterr().out
