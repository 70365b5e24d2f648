"""The analysis's output as users already know it: ``output.coffea`` (``coffea.util.save``; read it with
``coffea.util.load``) and ``histograms.root``, in which every ``hist.Hist`` of the output is written under its path in
the output (``ttbar/mass`` for ``output["ttbar"]["mass"]``) where ROOT can hold it (TH1, TH2, TH3 of numeric axes);
the others are listed with the reason.
"""

from __future__ import annotations

from pathlib import Path

from hepvine.model import atomic

# Characters a path component keeps in histograms.root (ROOT directory and key names); others become '_'.
_KEEP = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-+")


def _component(key) -> str:
    return "".join(c if c in _KEEP else "_" for c in str(key)) or "_"


def histograms(output, prefix: tuple[str, ...] = ()) -> list[tuple[str, object]]:
    """Every ``hist.Hist`` in OUTPUT (nested mappings), with its path: ``a/b/c`` for ``output[a][b][c]``."""
    import hist

    if isinstance(output, hist.Hist):
        return [("/".join(prefix) or "histogram", output)]
    if isinstance(output, dict):
        return [found for key, value in output.items() for found in histograms(value, (*prefix, _component(key)))]
    return []


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
    """H as uproot can write it: a histogram of integer counts (``Int64``, ``AtomicInt64`` storage, which uproot 5.7
    cannot write) as doubles, a TH1D's (exact up to 2**53 a bin, as ``Unlimited`` storage is written); others as they
    are."""
    import hist

    if not issubclass(h.storage_type, (hist.storage.Int64, hist.storage.AtomicInt64)):
        return h
    doubles = hist.Hist(*h.axes, storage=hist.storage.Double(), label=h.label, name=h.name)
    doubles.view(flow=True)[...] = h.view(flow=True)
    return doubles


def write_root(output, path: Path) -> dict:
    """``histograms.root`` of OUTPUT at PATH: {"written": [paths], "skipped": {path: why}}. A histogram uproot cannot
    write is skipped with uproot's reason, and the others are written."""
    import uproot

    written, skipped = [], {}
    with atomic.replacing(path) as tmp, uproot.recreate(tmp) as f:
        for name, h in histograms(output):
            why = _writable(h)
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
