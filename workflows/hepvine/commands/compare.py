"""``hepvine compare A B``: are two campaigns' histograms byte for byte the same?

A and B are each a campaign's results directory (``results/<campaign>``: its ``histograms.root``), a ROOT file of
histograms, or a result pickle (a batch's ``files/<batch>.pkl`` or a merge node's ``merge/<level>/<node>.pkl``: its
histograms and event counts); histograms in directories (a processor's nested output) are compared under their paths,
profiles as histograms. Every histogram's axes, and the bytes of its bin contents and variances (under- and
overflow included), must be identical; file timestamps and anything else in the files are not compared. Prints
``identical`` and exits 0, or names the first differing histogram (in name order) and bin with both values and exits
1; exits 2 when A or B cannot be read.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hepvine.jobs.merge import OldResult, read_counts

# What histograms.root holds: histograms, and profiles (a 1-D output histogram of Mean storage).
HISTOGRAM_CLASSES = ("TH1", "TH2", "TH3", "TProfile")


class CompareError(ValueError):
    """A product that cannot be compared; the message names the file and what to pass instead."""


@dataclass(frozen=True)
class Histogram:
    """One histogram as compared: its axes (kind, name, categories or edges) and its bins with flow."""

    axes: tuple
    values: np.ndarray
    variances: np.ndarray | None
    labels: tuple  # per axis, a function of the flow-included index giving the bin's description


def _axis(axis) -> tuple[tuple, callable]:
    """(what identifies AXIS, a describer of its flow-included bin index)."""
    under = 1 if axis.traits.underflow else 0
    size = len(axis)
    if axis.traits.ordered:  # Regular, Variable, Integer: bins between edges
        edges = np.asarray(axis.edges)
        ident = ("edges", axis.name, edges.tobytes())

        def label(i):
            j = i - under
            if j < 0:
                return f"{axis.name or 'x'} underflow (< {edges[0]:g})"
            if j >= size:
                return f"{axis.name or 'x'} overflow (>= {edges[-1]:g})"
            return f"{axis.name or 'x'} bin {j} [{edges[j]:g}, {edges[j + 1]:g})"
    else:  # StrCategory, IntCategory
        categories = tuple(axis[i] for i in range(size))
        ident = ("categories", axis.name, categories)

        def label(i):
            j = i - under
            return f"{axis.name}={categories[j]!r}" if 0 <= j < size else f"{axis.name} overflow"

    return ident, label


def from_hist(h) -> Histogram:
    """A hist.Hist (or boost_histogram.Histogram) as compared."""
    described = [_axis(a) for a in h.axes]
    values = np.ascontiguousarray(h.values(flow=True))
    variances = h.variances(flow=True)
    return Histogram(
        axes=tuple(d[0] for d in described),
        values=values,
        variances=None if variances is None else np.ascontiguousarray(variances),
        labels=tuple(d[1] for d in described),
    )


def load(path: Path) -> dict[str, Histogram]:
    """Every histogram of the product at PATH, by name (see the module's docstring for what PATH may be)."""
    path = Path(path)
    if path.is_dir():
        if not (path / "histograms.root").exists():
            raise CompareError(
                f"{path}: no histograms.root in this directory; pass a campaign's results directory "
                "(results/<campaign>), a ROOT file or a result pickle (files/<batch>.pkl, merge/<level>/<node>.pkl)"
            )
        path = path / "histograms.root"
    if not path.exists():
        raise CompareError(f"{path}: no such file or directory")
    if path.suffix == ".pkl":
        return _from_pickle(path)
    return _from_root(path)


def _from_root(path: Path) -> dict[str, Histogram]:
    import uproot

    try:
        f = uproot.open(path)
    except (OSError, ValueError) as e:
        raise CompareError(
            f"{path}: not a ROOT file uproot can read ({e}); pass histograms.root or a result pickle"
        ) from e
    found = {}
    with f:
        # Directories too: a processor's nested output is written under its path (hepvine.products.output).
        for name, classname in sorted(f.classnames(recursive=True, cycle=False).items()):
            if classname == "TDirectory":
                continue
            if not classname.startswith(HISTOGRAM_CLASSES):
                raise CompareError(
                    f"{path}: object {name!r} is a {classname}, not a histogram; compare files that "
                    "hold histograms only"
                )
            found[name] = from_hist(f[name].to_hist())
    return found


def _from_pickle(path: Path) -> dict[str, Histogram]:
    try:
        result = read_counts(path)
    except OldResult as e:
        raise CompareError(str(e)) from e
    except (OSError, pickle.UnpicklingError, EOFError) as e:
        raise CompareError(f"{path}: cannot be unpickled ({e})") from e
    if not isinstance(result, dict) or "output" not in result:
        raise CompareError(
            f"{path}: not a result (a dict with 'output' and 'events'); pass a batch's result (files/<batch>.pkl) "
            "or a merge node's (merge/<level>/<node>.pkl)"
        )
    from hepvine.products import output

    found = {name: from_hist(h) for name, h in output.histograms(result["output"])}
    for key, n in sorted(result.get("events", {}).items()):
        found[f"events/{key}"] = Histogram(axes=(), values=np.asarray(float(n)), variances=None, labels=())
    return found


def _bin(h: Histogram, flat: int) -> str:
    if not h.axes:
        return "its value"
    index = np.unravel_index(flat, h.values.shape)
    return ", ".join(label(int(i)) for label, i in zip(h.labels, index))


def _bytes(x: np.ndarray) -> np.ndarray:
    """X's elements as rows of bytes (so that NaN equals itself and -0.0 differs from 0.0)."""
    return np.ascontiguousarray(x).reshape(x.size, 1).view(np.uint8)


def _first_difference(name: str, a: Histogram, b: Histogram) -> str | None:
    if a.axes != b.axes:
        if len(a.axes) != len(b.axes):
            return f"histogram {name}: {len(a.axes)} axes against {len(b.axes)}"
        axis = next(i for i, (x, y) in enumerate(zip(a.axes, b.axes)) if x != y)
        return f"histogram {name}: axis {axis} ({a.axes[axis][1]!r}) has different bins or categories"
    for what, x, y in (("content", a.values, b.values), ("variance", a.variances, b.variances)):
        if (x is None) != (y is None):
            return f"histogram {name}: variances stored in only one of them"
        if x is None:
            continue
        differing = np.flatnonzero((_bytes(x) != _bytes(y)).any(axis=1))
        if len(differing):
            flat = int(differing[0])
            return (
                f"histogram {name}, {_bin(a, flat)}: {what} {float(x.reshape(-1)[flat])!r} against "
                f"{float(y.reshape(-1)[flat])!r} ({len(differing)} bin(s) differ)"
            )
    return None


def compare(a: dict[str, Histogram], b: dict[str, Histogram]) -> str | None:
    """None if A and B hold the same histograms with byte-identical contents, else the first difference."""
    for name in sorted(set(a) | set(b)):
        if name not in b:
            return f"histogram {name} only in the first"
        if name not in a:
            return f"histogram {name} only in the second"
        difference = _first_difference(name, a[name], b[name])
        if difference:
            return difference
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hepvine compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path, help="results/<campaign>, a ROOT file of histograms or a result pickle")
    parser.add_argument("second", type=Path)
    args = parser.parse_args(argv)
    try:
        a, b = load(args.first), load(args.second)
    except CompareError as e:
        print(f"hepvine compare: {e}", file=sys.stderr)
        return 2
    difference = compare(a, b)
    if difference is None:
        print(f"identical: {len(a)} histograms in {args.first} and {args.second}")
        return 0
    print(f"different: {difference}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
