"""``make bench`` (processor part): what running an analysis as a coffea processor costs, per core, side by side in
one process on the same files, for the AGC ttbar selection (``hepvine.examples.agc``):

(a) native: uproot reads the selection's branches of each file in steps and the selection fills the histograms the
    processor returns for the file (``agc.fills_of``: the same selection, the same fills; made once a file), the file
    opened with uproot's defaults, as a user's script opens it; on local files also as hepvine opens them
    (``native_same_source``: ``processor.local_source``, uproot's threaded file source), the like-for-like cost;
(b) hepvine's processor path as a campaign's job runs a file by default: ``hepvine.work.processor.run_file`` with
    ``TtbarProcessor`` and config ``columns: auto`` (``processor``: NanoEvents, chunks, accumulate; each chunk's fields
    the processor's trace does not read are placeholders, ``hepvine.work.cutform``, the ones it reads made as the
    Runner makes them from their collections, not from the tree's every branch; over the network the traced branches
    preloaded in bulk, a local file read lazily);
(b') the same with config ``columns: all`` (``all``: every field made), and that with every branch read lazily as the
    analysis touches it (``lazy``: what it did before it traced; on local files, the same as ``all``). These run as a
    job's files after its first: the trace and the tree's base form are a job's one-offs, kept for its later files of
    the dataset and layout; ``first`` is a job's first file with the default (a fresh analysis: it traces, derives the
    form and its cut);
(c) coffea's own ``processor.Runner`` with ``IterativeExecutor`` and the same processor over the same files;

on local files, on the same files read as ``root://`` through one of the sandbox's XCaches (warm: every variant
reads what the cache holds), through the same XCache behind a delay line that adds ``--rtt-ms`` to each round trip
(``benchmarks/latency.py``: the sandbox's loopback answers in microseconds, a data centre's network in a fraction of
a millisecond to a millisecond, and NanoEvents' lazy reads wait for each other), and on their ZSTD copies (``zstd``:
what hepvine's recompression makes of them, local; decompression is cheap there, so NanoEvents' fixed cost per chunk
weighs most). Each rate is the best of ``--repeat`` rounds, taken in turn (every other round in the reverse order);
the processor's cost over native is also given of the rounds' median rates, and as the median of each round's own
ratio (``paired``: native and the processor run one after the other, in the same round). The last is the one to read
on this VM, whose spells of slowness last seconds and take up to 40% (a file's CPU time, measured in one process): a
best or a median of rounds that ran a minute apart can land on either side of one. Writes
results/bench/processor-<schema>[-merged<K>].json and prints one table.

The inputs are the analysis bench's generated ttbar files (``benchmarks/analysis.py``: ``--schema compact``, 94
branches, or ``nanoaod``, the 1,590 branches of a real NanoAOD file), made once and kept; with ``--merge K``, K of them
merged into one file by ROOT's hadd (baskets as they are), for files of as many events as production NanoAOD holds
(NanoEvents' fixed cost per chunk and per file weighs less there).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import shutil
import statistics
import subprocess
import time
import warnings
from pathlib import Path

import hist
import uproot
from latency import DelayLine

from hepvine.devtools import services
from hepvine.examples import agc
from hepvine.model import dataset
from hepvine.work import processor, recompress

OUT = Path("results/bench")
LOCAL = ("local", "zstd")  # the places whose files are on this machine's disk
CHUNKSIZE = 100_000
AGC = "hepvine.examples.agc:TtbarProcessor"  # the processor benched


def bench_inputs(files: int, events: int, schema: str) -> list[Path]:
    spec = importlib.util.spec_from_file_location("bench_analysis", Path(__file__).with_name("analysis.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.inputs(files, events, 11, schema)


def merged(paths: list[Path], k: int) -> list[Path]:
    """PATHS merged K at a time by ROOT's ``hadd -ff`` (baskets copied as they are, the same LZMA-9: files of K times
    the events, as a production NanoAOD file has hundreds of thousands), made once and kept beside them. With fewer
    than K paths, one file of K of them taken in turn (the same events more than once: as costly to read)."""
    if k <= 1:
        return paths
    out = []
    groups = [paths[i : i + k] for i in range(0, len(paths) - k + 1, k)]
    groups = groups or [[paths[j % len(paths)] for j in range(k)]]
    for n, group in enumerate(groups):
        target = group[0].parent.parent / f"merged-{k}" / f"ttbar_{n:04d}.root"
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            print(f"bench: merging {len(group)} files into {target}", flush=True)
            subprocess.run(
                [recompress.root_program("hadd"), "-ff", f"{target}.part", *map(str, group)],
                check=True,
                capture_output=True,
            )
            Path(f"{target}.part").rename(target)
        out.append(target)
    return out


def zstd_copies(paths: list[Path]) -> list[Path]:
    """PATHS recompressed to ZSTD (level 5, hepvine's default) by ``hepvine.work.recompress``, made once and kept in a
    ``zstd5-<dir>`` directory beside theirs."""
    out = []
    for path in paths:
        target = path.parent.parent / f"zstd5-{path.parent.name}" / path.name
        if not target.exists():
            print(f"bench: recompressing {path} to ZSTD", flush=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            recompress.recompress(str(path), target, recompress.parse_codec("zstd:5"))
        out.append(target)
    return out


def native(urls: list[str], same_source: bool = False) -> int:
    """(a): each file's histograms (what the processor returns for it) made once and filled chunk by chunk, the files
    opened as a user's script opens them (uproot's default source) or, with SAME_SOURCE, as hepvine's jobs do
    (``processor.local_source``: a local file kept open)."""
    events = 0
    for url in urls:
        out: dict[str, hist.Hist] = {}
        with uproot.open(url, handler=processor.local_source(url) if same_source else None) as f:
            for chunk in f["Events"].iterate(agc.BRANCHES, step_size=CHUNKSIZE, library="ak"):
                agc.region_histograms(agc.fills_of(chunk, "ttbar", 0.1)[0], "ttbar", into=out)
                events += len(chunk)
    return events


def task_of(url: str):
    return dataset.FileTask(
        fid="ttbar/nominal/0",
        process="ttbar",
        variation="nominal",
        index=0,
        path=url,
        nevts=None,
        nevts_total=None,
        xsec=1.0,
        dataset="ttbar__nominal",
        metadata={"process": "ttbar", "variation": "nominal", "xsec": 1.0, "nevts_total": 10**6, "era": "run2"},
    )


class Untraced(dict):
    """An ``Analysis.traced`` that knows no trace: every chunk is read lazily."""

    def __contains__(self, key) -> bool:
        return True

    def __getitem__(self, key):
        return None


def as_new_files(instance):
    """INSTANCE (the AGC processor) made to read each round's files as a job reads files it has not met: without the
    branch names of the file it read last (``TtbarProcessor._names_of``), which would be this file's, read again."""
    instance._names = agc.TtbarProcessor._names
    return instance


def hepvine_processor(urls: list[str], analysis) -> int:
    as_new_files(analysis.instance)
    return sum(processor.run_file(url, task_of(url), analysis)[1] for url in urls)


def coffea_runner(urls: list[str], analysis) -> int:
    from coffea import processor as coffea_processor

    fileset = {"ttbar__nominal": {"files": {url: "Events" for url in urls}, "metadata": task_of(urls[0]).metadata}}
    runner = coffea_processor.Runner(
        executor=coffea_processor.IterativeExecutor(), schema=analysis.schema, chunksize=CHUNKSIZE
    )
    out = runner(fileset, as_new_files(analysis.instance))
    return int(sum(h.values().sum() for k, h in out.items() if k.startswith("events_")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--schema", default="compact", choices=("compact", "nanoaod"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--merge", type=int, default=1, help="read files of MERGE generated inputs each (hadd): more events a file"
    )
    parser.add_argument(
        "--rtt-ms",
        type=float,
        default=1.0,
        help="the round trip the delay line adds in front of the XCache for the xcache+rtt row (0: no such row)",
    )
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        return run(args, stack)


def run(args, stack: contextlib.ExitStack) -> int:
    warnings.filterwarnings("ignore", module="coffea")
    paths = merged(bench_inputs(args.files, args.events, args.schema), args.merge)
    origin = services.load()["xrootd"]["origin"]
    cache = next(iter(services.load()["xrootd"]["caches"].values()))
    suffix = f"-merged{args.merge}" if args.merge > 1 else ""
    store = Path(origin["data_dir"]) / "store" / f"bench-processor-{args.schema}{suffix}"
    store.mkdir(parents=True, exist_ok=True)
    for path in paths:
        if not (store / path.name).exists():
            shutil.copy(path, store / path.name)
    where = {
        "local": [str(p) for p in paths],
        "xcache": [f"{cache['url']}//store/{store.name}/{p.name}" for p in paths],
    }
    if args.rtt_ms > 0:
        port = stack.enter_context(DelayLine("127.0.0.1", cache["port"], args.rtt_ms / 1000))
        where[f"xcache+{args.rtt_ms:g}ms"] = [f"root://127.0.0.1:{port}//store/{store.name}/{p.name}" for p in paths]
    where["zstd"] = [str(p) for p in zstd_copies(paths)]

    def load_agc(columns: str = processor.COLUMNS[0]) -> processor.Analysis:
        return processor.load(AGC, schema="NanoAODSchema", chunksize=CHUNKSIZE, columns=columns)

    analysis, every, lazy = load_agc(), load_agc("all"), load_agc("all")
    lazy.traced = Untraced()
    processor.settle(analysis)  # as a job does before its files (the Runner's column gains from it too)
    variants = {
        "native": lambda urls: native(urls),
        "native_same_source": lambda urls: native(urls, same_source=True),
        "processor": lambda urls: hepvine_processor(urls, analysis),
        "all": lambda urls: hepvine_processor(urls, every),
        "lazy": lambda urls: hepvine_processor(urls, lazy),
        "first": lambda urls: hepvine_processor(urls, load_agc()),
        "coffea_runner": lambda urls: coffea_runner(urls, analysis),
    }
    best: dict[str, dict[str, float]] = {w: {} for w in where}
    rounds: dict[str, dict[str, list[float]]] = {w: {} for w in where}  # every round's rate, for the medians
    counts: dict[str, int] = {}
    for round_ in range(args.repeat + 1):  # round 0 warms the caches (XCache, page cache, imports)
        for place, urls in where.items():
            # Every other round in the reverse order: a slow spell of this VM then falls on both sides of a pair
            for name, run in list(variants.items())[:: -1 if round_ % 2 else 1]:
                if name == "native_same_source" and place not in LOCAL:
                    continue  # (over XRootD hepvine opens a file as uproot does by default)
                gc.collect()  # each variant starts with no garbage of the one before to collect
                wall, cpu = time.perf_counter(), time.process_time()
                n = run(urls)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                counts.setdefault(name, n)
                if n != counts[name]:
                    raise SystemExit(f"bench: {name} analysed {n} events, before {counts[name]}")
                if round_:
                    best[place][name] = max(best[place].get(name, 0.0), n / wall)
                    rounds[place].setdefault(name, []).append(n / wall)
    if len(set(counts.values())) != 1:
        raise SystemExit(f"bench: the variants analysed different events: {counts}")
    median = {p: {name: statistics.median(rates) for name, rates in r.items()} for p, r in rounds.items()}
    # Each round's native and processor ran one after the other (``paired``): the median of the rounds' own ratios
    paired = {
        p: {
            versus: round(statistics.median(n / r for n, r in zip(rounds[p][versus], rounds[p]["processor"])), 3)
            for versus in ("native", "native_same_source")
            if versus in rounds[p]
        }
        for p in where
    }
    ratios = {
        "processor_over_native": {p: round(best[p]["native"] / best[p]["processor"], 3) for p in where},
        "processor_over_native_medians": {p: round(median[p]["native"] / median[p]["processor"], 3) for p in where},
        "processor_over_native_same_source_medians": {
            p: round(median[p]["native_same_source"] / median[p]["processor"], 3) for p in where if p in LOCAL
        },
        "processor_over_native_same_source": {
            p: round(best[p]["native_same_source"] / best[p]["processor"], 3) for p in where if p in LOCAL
        },
        "all_over_native": {p: round(best[p]["native"] / best[p]["all"], 3) for p in where},
        "all_over_coffea_runner": {p: round(best[p]["all"] / best[p]["coffea_runner"], 3) for p in where},
        "processor_over_coffea_runner": {p: round(best[p]["processor"] / best[p]["coffea_runner"], 3) for p in where},
        "preloaded_over_lazy": {p: round(best[p]["all"] / best[p]["lazy"], 3) for p in where},
        "first_over_coffea_runner": {p: round(best[p]["first"] / best[p]["coffea_runner"], 3) for p in where},
    }
    result = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "files": len(paths),
        "events_per_file": args.events * args.merge,
        "merged_from": args.merge,
        "schema": args.schema,
        "chunksize": CHUNKSIZE,
        "rtt_ms_added": args.rtt_ms,
        "events": counts["native"],
        "rates_hz_per_core": {p: {k: round(v) for k, v in r.items()} for p, r in best.items()},
        "median_rates_hz_per_core": {p: {k: round(v) for k, v in r.items()} for p, r in median.items()},
        "cost_of_processor_over_native": ratios["processor_over_native"],
        "processor_speed_over_coffea_runner": ratios["processor_over_coffea_runner"],
        "cost_of_processor_over_native_same_source": ratios["processor_over_native_same_source"],
        "cost_of_processor_over_native_medians": ratios["processor_over_native_medians"],
        "cost_of_processor_over_native_same_source_medians": ratios["processor_over_native_same_source_medians"],
        "cost_of_processor_over_native_paired_medians": paired,
        "cost_of_columns_all_over_native": ratios["all_over_native"],
        "columns_all_speed_over_coffea_runner": ratios["all_over_coffea_runner"],
        "columns_all_preloaded_speed_over_lazy": ratios["preloaded_over_lazy"],
        "first_file_speed_over_coffea_runner": ratios["first_over_coffea_runner"],
        "targets": {"processor cost over native <=": 1.1, "processor over coffea Runner (xcache) >=": 1.5},
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"processor-{args.schema}{suffix}.json").write_text(json.dumps(result, indent=2))
    print(
        f"processor bench: {len(paths)} files x {args.events * args.merge:,} events ({args.schema} layout), "
        f"AGC processor, NanoAODSchema, chunksize {CHUNKSIZE:,}; events/s per core, best of {args.repeat}"
    )
    print(
        f"{'where':13} {'native':>10} {'processor':>10} {'first':>10} {'coffea Runner':>14} "
        f"{'proc/native cost':>17} {'proc/Runner':>12} {'first/Runner':>13} {'all':>10} {'lazy':>10} "
        f"{'all/native cost':>16} {'all/Runner':>11} {'all/lazy':>9}"
    )
    for place in where:
        r = best[place]
        print(
            f"{place:13} {r['native']:>10,.0f} {r['processor']:>10,.0f} {r['first']:>10,.0f} "
            f"{r['coffea_runner']:>14,.0f} {ratios['processor_over_native'][place]:>17.2f} "
            f"{ratios['processor_over_coffea_runner'][place]:>12.2f} "
            f"{ratios['first_over_coffea_runner'][place]:>13.2f} {r['all']:>10,.0f} {r['lazy']:>10,.0f} "
            f"{ratios['all_over_native'][place]:>16.2f} "
            f"{ratios['all_over_coffea_runner'][place]:>11.2f} {ratios['preloaded_over_lazy'][place]:>9.2f}"
        )
    print(
        "local files, processor/native cost with native opening them as hepvine does: "
        + ", ".join(f"{p} {r:.2f}" for p, r in ratios["processor_over_native_same_source"].items())
    )
    print(
        f"processor/native cost of the median rates of the {args.repeat} rounds (not the best): "
        + ", ".join(f"{p} {r:.2f}" for p, r in ratios["processor_over_native_medians"].items())
        + "; native opening them as hepvine does: "
        + ", ".join(f"{p} {r:.2f}" for p, r in ratios["processor_over_native_same_source_medians"].items())
    )
    print(
        "processor/native cost, the median of each round's own ratio (native and processor run one after the other): "
        + ", ".join(
            f"{p} {r['native']:.2f}" + (f" (as hepvine opens it {r['native_same_source']:.2f})" if len(r) > 1 else "")
            for p, r in paired.items()
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
