"""The campaign's plots: a default plot of every 1-D and 2-D histogram of the analysis's output (``output.coffea``,
after its postprocess; a histogram with category axes gets one line per category of a 1-D remainder, or is skipped
when more remains), and a timeline of the campaign — the data rate and the number of file tasks running, over time.

Written as PNG files into one directory: ``<path in the output, '/' as '__'>.png`` (``file_names``: a name met before
gets ``-2``, one too long for a file is cut and ends with a hash) and ``timeline.png``.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
import threading
from pathlib import Path

import numpy as np


def _pyplot():
    """matplotlib's pyplot, drawing to files only (a login node has no display). Imported where figures are drawn:
    the processes that ``drawing`` forks import it side by side, not the report's process before them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _steps(ax, h, **style) -> None:
    """1-D histogram H on AX: its contents as steps, with error bars (the square root of its variances, or of its
    counts when it keeps none) at the bins' centres."""
    values, variances = h.values(), h.variances()
    steps = ax.stairs(values, h.axes[0].edges, **style)
    errors = np.sqrt(variances if variances is not None else np.abs(values))
    ax.vlines(h.axes[0].centers, values - errors, values + errors, colors=steps.get_edgecolor(), linewidth=1)


# The figure this process draws its 1-D plots on, emptied between them: a new one costs more than its drawing (its
# axes and ~20 ticks are made again, ~30 ms).
_FIGURE: list = []


def _empty_axes():
    """This process's 1-D figure and axes, holding nothing of the plot before: its lines, patches, legend and title
    removed, its data limits and colour cycle reset (ticks, labels and limits follow the next plot's data)."""
    if not _FIGURE:
        _FIGURE.extend(_pyplot().subplots(figsize=(8, 6)))
    fig, ax = _FIGURE
    for artist in (*ax.lines, *ax.collections, *ax.patches, *ax.texts):
        artist.remove()
    if ax.get_legend() is not None:
        ax.get_legend().remove()
    ax.relim()
    ax.set_prop_cycle(None)
    return fig, ax


def histogram(h, title: str, path: Path) -> bool:
    """A default plot of H (1-D: steps with error bars; 2-D: colour map; category axes: one 1-D line per category,
    up to a 1-D remainder) at PATH; False when H has no such view."""
    import hist

    categories = [a for a in h.axes if isinstance(a, (hist.axis.StrCategory, hist.axis.IntCategory))]
    numeric = [a for a in h.axes if a not in categories]
    if len(numeric) not in (1, 2) or (categories and len(numeric) != 1) or len(categories) > 1:
        return False
    if len(numeric) == 2:
        import mplhep

        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(8, 6))
        mplhep.hist2dplot(h, ax=ax)
        ax.set_title(title, loc="left", fontsize="medium")
        fig.savefig(path, dpi=72)
        plt.close(fig)
        return True
    fig, ax = _empty_axes()
    if categories:
        axis = categories[0]
        for value in list(axis)[:20]:  # (hist.loc: an integer category is a value, not an index)
            _steps(ax, h[{axis.name: hist.loc(value)}], label=f"{axis.name}={value}")
        ax.legend(fontsize="small")
    else:
        _steps(ax, h)
    ax.set_xlabel(numeric[0].label or numeric[0].name)
    ax.set_title(title, loc="left", fontsize="medium")
    fig.savefig(path, dpi=72)
    return True


# What ``drawing`` draws, for the processes it forks (they inherit it rather than receive a copy): the figures as
# (name, histogram or None for the timeline, path), and the records of the timeline.
_TO_DRAW: list = []
_RECORDS: list = []
FIGURES_A_TIME = 4


def _draw(indices: list[int]) -> list[str]:
    """The figures of INDICES; a figure that cannot be drawn is left out, named with its error (returned)."""
    failed = []
    for index in indices:
        name, h, path = _TO_DRAW[index]
        try:
            if h is None:
                timeline(_RECORDS, path)
            else:
                histogram(h, name, path)
        except Exception as e:  # a default plot; the campaign's products do not depend on it
            failed.append(f"{path.name}: {type(e).__name__}: {e}")
    return failed


def file_names(names: list[str]) -> list[str]:
    """The plot file of each histogram path of NAMES: ``a/b`` as ``a__b.png``, without leading underscores, and with
    ``-2``, ``-3``... added to a file name met before, letters' case aside (``timeline.png`` is the timeline's; names
    without a leading '_' are given theirs first): no plot overwrites another, on a filesystem blind to case too.
    Snakemake's report links to each file by its name, a reST hyperlink target, which docutils cannot read when it
    begins with ``_`` ("malformed hyperlink target": ``.. __x`` is its anonymous target; a fileset's DAS key, e.g.
    ``/TTto.../NANOAODSIM``, begins a histograms.root directory with one) and finds a duplicate in two that differ
    only in case. A name too long for a file (over ``STEM_BYTES`` bytes: a long DAS key and a deep path; most
    filesystems take 255) keeps its beginning and ends with a hash of the whole (``_within_limit``)."""
    joined = [name.replace("/", "__") for name in names]
    stems = [_within_limit(j.lstrip("_") or "histogram") for j in joined]
    taken = {"timeline.png"}
    files = [""] * len(names)
    for i in sorted(range(len(names)), key=lambda i: stems[i] != joined[i]):  # those left as they are first
        file, n = f"{stems[i]}.png", 2
        while file.casefold() in taken:
            file, n = f"{stems[i]}-{n}.png", n + 1
        taken.add(file.casefold())
        files[i] = file
    return files


# The bytes a plot file's stem may have: 255 (most filesystems' limit on a name) less '.png' and room for a '-<n>'.
STEM_BYTES = 240


def _within_limit(stem: str) -> str:
    """STEM as it is when it has at most ``STEM_BYTES`` bytes (UTF-8), else its beginning (whole characters) and '-'
    with the first 16 hex digits of its SHA-256: names that share their beginning keep files of their own."""
    encoded = stem.encode()
    if len(encoded) <= STEM_BYTES:
        return stem
    digest = hashlib.sha256(encoded).hexdigest()[:16]
    return encoded[: STEM_BYTES - len(digest) - 1].decode(errors="ignore") + "-" + digest


@contextlib.contextmanager
def drawing(named: list[tuple[str, object]], records: list[dict], outdir: Path, processes: int = 1):
    """The campaign's plots into OUTDIR, drawn while the body of this context runs (the report writes its files):
    the timeline of RECORDS as ``timeline.png`` and a default plot of each (name, histogram) of NAMED as ``<name, '/'
    as '__'>.png`` (``file_names``: a leading '_' dropped, ``-2`` on a name met before, a name over ``STEM_BYTES``
    cut). With PROCESSES > 1 they are
    shared among that many processes forked on entry (a figure costs ~35 ms and each process ~0.4 s to load
    matplotlib and its fonts; an analysis has hundreds); with 1 they are drawn here when the body ends, as they are
    when this process already runs threads (a fork would copy their locks). Leaving waits for them. A figure that
    cannot be drawn is left out and named on standard error with its error (a default plot: the products written in
    the body must not be lost for it). An exception of the body is raised once the processes have drawn what they had
    begun."""
    global _TO_DRAW, _RECORDS
    outdir.mkdir(parents=True, exist_ok=True)
    _TO_DRAW = [("timeline", None, outdir / "timeline.png")]
    _TO_DRAW += [(name, h, outdir / file) for (name, h), file in zip(named, file_names([n for n, _ in named]))]
    _RECORDS = records
    indices = list(range(len(_TO_DRAW)))
    shares = [indices[i : i + FIGURES_A_TIME] for i in range(0, len(indices), FIGURES_A_TIME)]
    failed = []
    try:
        if processes < 2 or len(shares) < 2 or threading.active_count() > 1:
            yield
            failed = _draw(indices)
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(min(processes, len(shares)), mp_context=multiprocessing.get_context("fork")) as pool:
            # A few figures at a time: the processes share them as they go.
            drawn = [pool.submit(_draw, share) for share in shares]
            try:
                yield
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
            failed = [name for future in drawn for name in future.result()]
    finally:
        _TO_DRAW, _RECORDS = [], []
        for what in failed:
            print(f"hepvine.products.plots: not drawn: {what}", file=sys.stderr)


def timeline_series(records: list[dict], bins: int = 100) -> dict:
    """The campaign's data rate (Gbps, each task's bytes spread evenly over its run) and running tasks, per time bin
    (seconds since the first task started)."""
    if not records:
        return {"time": np.zeros(1), "gbps": np.zeros(1), "running": np.zeros(1)}
    t0 = min(r["start"] for r in records)
    t1 = max(r["end"] for r in records)
    edges = np.linspace(0.0, max(t1 - t0, 1e-3), bins + 1)
    width = edges[1] - edges[0]
    nbytes = np.zeros(bins)
    busy = np.zeros(bins)
    for r in records:
        start, end = r["start"] - t0, max(r["end"] - t0, r["start"] - t0 + 1e-6)
        overlap = np.clip(np.minimum(edges[1:], end) - np.maximum(edges[:-1], start), 0, None)
        busy += overlap / width
        nbytes += r["bytes_read"] * overlap / (end - start)
    return {"time": edges, "gbps": nbytes * 8 / width / 1e9, "running": busy}


def timeline(records: list[dict], path: Path) -> None:
    import mplhep

    plt = _pyplot()
    series = timeline_series(records)
    with plt.style.context(mplhep.style.CMS):
        # (CMS style for this figure only: the process may draw histograms after it)
        fig, (rate, running) = plt.subplots(2, 1, sharex=True, figsize=(10, 8))
        rate.stairs(series["gbps"], series["time"], fill=True, alpha=0.6)
        rate.set_ylabel("data rate [Gbps]")
        running.stairs(series["running"], series["time"], color="tab:orange")
        running.set_ylabel("tasks running")
        running.set_xlabel("time since the first file task started [s]")
        failed = sum(1 for r in records if r["failure"] is not None)
        rate.set_title(f"{len(records)} files, {failed} failed", loc="left", fontsize="medium")
        fig.savefig(path, dpi=80)
        plt.close(fig)
