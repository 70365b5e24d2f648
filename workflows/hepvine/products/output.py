"""The analysis's output as users already know it: ``output.coffea`` (``coffea.util.save``; read it with
``coffea.util.load``) and ``histograms.root``, in which every histogram of the output (``hist.Hist``, or
boost-histogram's, in its mappings, lists and tuples) is written under its path in the output (``ttbar/mass`` for
``output["ttbar"]["mass"]``, ``jets/0`` for ``output["jets"][0]``) where ROOT can hold it (TH1, TH2, TH3 of numeric
axes, every flow bin kept); the others are listed with the reason, as is one whose path in ROOT's characters is
another's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hepvine.model import atomic

# Characters a path component keeps in histograms.root (ROOT directory and key names); others become '_'.
_KEEP = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-+")


def _component(key) -> str:
    return "".join(c if c in _KEEP else "_" for c in str(key)) or "_"


def histograms(output, prefix: tuple[str, ...] = ()) -> list[tuple[str, object]]:
    """Every histogram in OUTPUT (a ``hist.Hist``, or boost-histogram's as a ``hist.Hist``; in nested mappings, lists
    and tuples), with its path: ``a/b/c`` for ``output[a][b][c]``, ``a/0`` for ``output[a][0]``."""
    import boost_histogram
    import hist

    if isinstance(output, boost_histogram.Histogram):
        return [("/".join(prefix) or "histogram", output if isinstance(output, hist.Hist) else hist.Hist(output))]
    if isinstance(output, Mapping):
        items = output.items()
    elif isinstance(output, (list, tuple)):
        items = enumerate(output)
    else:
        return []
    return [found for key, value in items for found in histograms(value, (*prefix, _component(key)))]


def _writable(h) -> str | None:
    """Why H cannot be a ROOT histogram, or None when it can."""
    import hist

    if not 1 <= h.ndim <= 3:
        return f"{h.ndim} axes (ROOT holds 1 to 3)"
    for axis in h.axes:
        if isinstance(axis, (hist.axis.StrCategory, hist.axis.IntCategory)):
            return f"category axis {axis.name!r} (ROOT's axes are numeric): select a category to write it"
    return None


def _root_writable(h):
    """H as uproot can write it, every bin kept: a histogram of integer counts (``Int64``, ``AtomicInt64`` storage,
    which uproot 5.7 cannot write) as doubles, a TH1D's (exact up to 2**53 a bin, as ``Unlimited`` storage is
    written); an axis without an underflow or overflow bin given an empty one (as a ``Variable`` axis of its edges):
    uproot writes a histogram's flow bins only when each axis has both, and else zeroes them all, the other axes'
    too. Others as they are."""
    import hist

    integers = issubclass(h.storage_type, (hist.storage.Int64, hist.storage.AtomicInt64))
    flowless = [not (a.traits.underflow and a.traits.overflow) for a in h.axes]
    if not integers and not any(flowless):
        return h
    axes = [
        hist.axis.Variable(a.edges, name=a.name, label=a.label, underflow=True, overflow=True) if lacks else a
        for a, lacks in zip(h.axes, flowless)
    ]
    storage = hist.storage.Double() if integers else h.storage_type()
    written = hist.Hist(*axes, storage=storage, label=h.label, name=h.name)
    held = tuple(
        slice(0 if a.traits.underflow else 1, len(a) + (2 if a.traits.overflow else 1)) for a in h.axes
    )  # where H's bins, flow included, are among the written histogram's
    written.view(flow=True)[held] = h.view(flow=True)
    return written


def write_root(output, path: Path) -> dict:
    """``histograms.root`` of OUTPUT at PATH: {"written": [paths], "skipped": {path: why}}. A histogram uproot cannot
    write is skipped with uproot's reason, and the others are written."""
    import uproot

    written, skipped = [], {}
    with atomic.replacing(path) as tmp, uproot.recreate(tmp) as f:
        for name, h in histograms(output):
            why = _writable(h)
            if name in written or name in skipped:  # (uproot would write it as the name's next cycle, hiding one)
                why = f"its path in ROOT's characters, {name}, is another histogram's too: rename one of their keys"
                while name in written or name in skipped:
                    name = f"{name} (again)"
            if why is None:
                try:  # converted before it is stored: a refused one leaves no directory of its path behind
                    writable = uproot.to_writable(_root_writable(h))
                except (TypeError, ValueError, NotImplementedError) as e:  # what uproot cannot write
                    why = f"uproot cannot write it ({type(e).__name__}: {e})"
                else:
                    f[name] = writable
                    written.append(name)
            if why is not None:
                skipped[name] = why
    return {"written": written, "skipped": skipped}


def save(output, path: Path) -> None:
    """OUTPUT as ``output.coffea`` (coffea.util.save: cloudpickle, lz4), written atomically."""
    from coffea.util import save as coffea_save

    with atomic.replacing(path) as tmp:
        coffea_save(output, str(tmp))
