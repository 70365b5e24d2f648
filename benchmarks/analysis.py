"""``make bench`` (analysis part): per-core event rates, measured side by side in one process on the same events, of

(a) uproot reading the analysis's branches and nothing else — the I/O limit — on LZMA-9 and on ZSTD-5 inputs;
(b) the hepvine analysis of a file (``hepvine.jobs.driver.run_file``, what a campaign job runs per file) on the LZMA-9
    inputs;
(c) the same on their ZSTD-5 copies;
(d) the same selection written with coffea's NanoEvents, on the ZSTD-5 copies (checked to select the same events);

plus the recompression's throughput (``hepvine.work.recompress``: copy, then verify every branch) and the ZSTD/LZMA size
ratio. Writes results/bench/analysis.json (``--schema compact``, whose rates ``hepvine plan`` reads) or
results/bench/analysis-nanoaod.json. Everything runs in this one process, so "per core" is per process;
each rate is the best of ``--repeat`` rounds, taken in turn so that machine noise hits every variant alike.

The inputs (generated ttbar, LZMA-9, as in CMS NanoAOD; ``--schema compact``, the default, has hepvine's 94
branches, ``nanoaod`` the layout of a real NanoAOD file, 1,590 branches: on small files opening them dominates) are made
once and kept in results/bench/inputs-<schema>.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from pathlib import Path

import awkward as ak
import numpy as np
import uproot

from hepvine.devtools import generate
from hepvine.examples import agc as analysis
from hepvine.jobs import driver
from hepvine.model import eras
from hepvine.reading import fetch
from hepvine.work import processor, recompress

OUT = Path("results/bench")
TARGETS = {"zstd_over_lzma": 3.0, "zstd_over_io_limit": 0.6, "hepvine_over_coffea": 1.5, "zstd_size_over_lzma": 1.3}


def inputs(files: int, events: int, seed: int, schema: str) -> list[Path]:
    """The LZMA-9 inputs, generated the first time (a manifest says what the kept files are)."""
    where = OUT / f"inputs-{schema}" / "lzma"
    manifest = where / "manifest.json"
    wanted = {"files": files, "events": events, "seed": seed, "process": "ttbar", "schema": schema}
    paths = [where / f"ttbar_{i:04d}.root" for i in range(files)]
    if manifest.exists() and json.loads(manifest.read_text()) == wanted and all(p.exists() for p in paths):
        return paths
    for i, path in enumerate(paths):
        print(f"bench: generating {path} ({events} events, {schema} schema, LZMA-9)", flush=True)
        generate.write_file(path, "ttbar", events, index=i, seed=seed, schema=schema)
    manifest.write_text(json.dumps(wanted))
    return paths


def timed(fn) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds, what FN() returned)."""
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, value


def shard_entry(path: Path, process: str, n: int, xsec: float, era: str | None = None) -> dict:
    """PATH as the only file of the spec sample PROCESS/nominal, a shard's entry as
    hepvine.routing.index.shard writes it."""
    metadata = {"process": process, "variation": "nominal", "xsec": xsec, "nevts_total": n, "era": era}
    return {
        "fid": f"{process}/nominal/{path.stem}",
        "path": str(path),
        "process": process,
        "variation": "nominal",
        "index": 0,
        "nevts": n,
        "nevts_total": n,
        "xsec": xsec,
        "era": era,
        "bytes": None,
        "dataset": f"{process}__nominal",
        "treename": "Events",
        "metadata": metadata,
        "uuid": None,
        "steps": None,
        "route": fetch.local_route(str(path)),
    }


def agc() -> processor.Analysis:
    """The analysis a campaign runs by default (hepvine.examples.agc:TtbarProcessor, NanoAODSchema, chunks of
    processor.DEFAULT_CHUNKSIZE entries)."""
    return processor.load("hepvine.examples.agc:TtbarProcessor", {"lumi_pb": 3378})


def read_only(paths: list[Path]) -> int:
    events = 0
    for path in paths:
        with uproot.open(path) as f:
            for chunk in f["Events"].iterate(analysis.BRANCHES, step_size=processor.DEFAULT_CHUNKSIZE, library="ak"):
                events += len(chunk)
    return events


def hepvine_analysis(paths: list[Path], events_per_file: int) -> tuple[int, int]:
    """(events, bytes read) of the analysis of PATHS."""
    events = nbytes = 0
    analysis_ = agc()
    for path in paths:
        record, _ = driver.run_file(shard_entry(path, "ttbar", events_per_file, 833.9), "bench", analysis_)
        if record.failure:
            raise RuntimeError(record.error)
        events += record.events
        nbytes += record.bytes_read
    return events, nbytes


def coffea_observables(events, scale: float, selection: eras.Selection = analysis.RUN2) -> dict[str, tuple]:
    """The AGC selection as a coffea user writes it: NanoEvents collections and their four-vector behaviour, with
    SELECTION's b tag and IDs (the jet ID: coffea's ``isTightLeptonVeto``, or for NanoAOD v15 the JME criteria on
    the jet's fractions, written here again with coffea's fields). Per region: (observable, the selected jets' pt of
    its events, the input of the b-tag weight variations)."""
    era = selection.era
    btag = era.btag.removeprefix("Jet_")
    electron_id, tight = era.electron_id
    electrons = events.Electron[
        (events.Electron.pt > 30)
        & (abs(events.Electron.eta) < 2.1)
        & (events.Electron[electron_id.removeprefix("Electron_")] == tight)
        & (events.Electron.sip3d < 4)
    ]
    muons = events.Muon[
        (events.Muon.pt > 30)
        & (abs(events.Muon.eta) < 2.1)
        & events.Muon[era.muon_id.removeprefix("Muon_")]
        & (events.Muon.sip3d < 4)
        & (events.Muon.pfRelIso04_all < 0.15)
    ]
    jets = ak.with_field(events.Jet, events.Jet.pt * scale, "pt")
    if selection.jet_id == eras.JET_ID_BIT:
        jet_id = jets.isTightLeptonVeto
    else:
        multiplicity = ak.values_astype(jets.chMultiplicity, np.int64) + jets.neMultiplicity
        jet_id = (
            (abs(jets.eta) <= 2.6)
            & (jets.neHEF < 0.99)
            & (jets.neEmEF < 0.9)
            & (multiplicity > 1)
            & (jets.chHEF > 0.01)
            & (jets.chMultiplicity > 0)
            & (jets.muEF < 0.8)
            & (jets.chEmEF < 0.8)
        )
    jets = jets[(jets.pt > 30) & (abs(jets.eta) < 2.4) & jet_id]
    nbtag = ak.sum(jets[btag] > era.btag_wp, axis=1)
    selected = (ak.num(electrons) + ak.num(muons) == 1) & (ak.num(jets) >= 4)
    one_b, two_b = jets[selected & (nbtag == 1)], jets[selected & (nbtag >= 2)]
    ht = ak.sum(one_b.pt, axis=1)
    trijet = ak.combinations(two_b, 3, fields=["j1", "j2", "j3"])
    p4 = trijet.j1 + trijet.j2 + trijet.j3
    max_btag = np.maximum(np.maximum(trijet.j1[btag], trijet.j2[btag]), trijet.j3[btag])
    best = ak.argmax(ak.where(max_btag > era.btag_wp, p4.pt, -1.0), axis=1, keepdims=True)
    return {"4j1b": (ak.to_numpy(ht), one_b.pt), "4j2b": (ak.to_numpy(ak.flatten(p4[best].mass)), two_b.pt)}


def coffea_weights(variation: str, jet_pt, weight: float) -> np.ndarray:
    """The AGC's weight of histogram VARIATION for events whose selected jets have JET_PT (ttbar_analysis_pipeline.py
    lines 324-337 with the corrections of make_corrections_json.py, evaluated in double as correctionlib does)."""
    weights = np.full(len(jet_pt), weight)
    if variation.startswith("btag_var_"):
        pt = ak.to_numpy(jet_pt[:, int(variation.split("_")[2])]).astype(np.float64)
        return weights * (1.0 + (pt * 0.075 / 50) if variation.endswith("_up") else 1.0 - (pt * 0.075 / 50))
    if variation.startswith("scale_var_"):
        return weights * (1.0 + 0.025 if variation.endswith("_up") else 1.0 - 0.025)
    return weights


def coffea_histogram(
    path: Path | str, process: str, weight: float, selection: eras.Selection = analysis.RUN2
) -> tuple[object, int, dict[str, int]]:
    """(histogram, events, nominal count per region) of the file at PATH (TTree or RNTuple ``Events``), a simulated
    nominal sample of PROCESS, with coffea: every histogram variation ``analysis.variations`` says it fills."""
    from coffea.nanoevents import NanoAODSchema, NanoEventsFactory

    with warnings.catch_warnings():  # generated files lack NanoAOD's cross-reference indices; harmless here
        warnings.simplefilter("ignore")
        events = NanoEventsFactory.from_root({str(path): "Events"}, schemaclass=NanoAODSchema, mode="virtual").events()
    h = analysis.new_histogram()
    selected = {name: coffea_observables(events, scale, selection) for name, scale in analysis.VARIATIONS.items()}
    for region in analysis.REGIONS:
        for variation in analysis.variations(process, "nominal", data=False):
            values, jet_pt = selected[variation if variation in selected else "nominal"][region]
            h.fill(
                region=region,
                process=process,
                variation=variation,
                observable=values,
                weight=coffea_weights(variation, jet_pt, weight),
            )
    return h, len(events), {region: len(values) for region, (values, _) in selected["nominal"].items()}


def coffea_analysis(paths: list[Path], counts: dict | None = None) -> int:
    events_total = 0
    for path in paths:
        _, events, selected = coffea_histogram(path, "ttbar", 0.1)
        if counts is not None:
            for region, n in selected.items():
                counts[region] = counts.get(region, 0) + n
        events_total += events
    return events_total


def selected_by_hepvine(paths: list[Path]) -> dict:
    counts = {}
    for path in paths:
        events = uproot.open(path)["Events"].arrays(analysis.BRANCHES, library="ak")
        for region, n in analysis.fill(analysis.new_histogram(), events, "ttbar", 0.1).items():
            counts[region] = counts.get(region, 0) + n
    return counts


# The real files' Run 3 simulation does not say its year (hepvine.model.eras): the era its spec would give.
REAL_SPEC_ERAS = {"ggH_M125_amcatnlo_v13.root": "run3-2022EE", "nano_tt_v15.root": "run3-2022"}


def real_files(directory: Path, repeat: int, codec: str) -> dict:
    """The three variants (I/O limit, hepvine, coffea) on every real NanoAOD file of DIRECTORY, as they are (TTree
    and RNTuple, LZMA and ZLIB), and on their copies recompressed by hepvine to CODEC (results/bench/real-<codec>/,
    made once): per-file costs (opening a tree of 1,000-2,700 branches, deciding the era) dominate."""
    sources = sorted(directory.glob("*.root"))
    if not sources:
        raise SystemExit(f"--real: no .root file in {directory}: give the directory of ../shared/nanoaod")
    copies = [OUT / f"real-{codec.replace(':', '-')}" / p.name for p in sources]
    copies[0].parent.mkdir(parents=True, exist_ok=True)
    for source, copy in zip(sources, copies):
        if not copy.exists():
            recompress.recompress(str(source), copy, recompress.parse_codec(codec))
    selections, entries = {}, {}
    for path in sources:
        with uproot.open(path) as f:
            selections[path.name] = eras.for_file(str(path), f, f["Events"], REAL_SPEC_ERAS.get(path.name))
            entries[path.name] = f["Events"].num_entries

    def io_limit(paths: list[Path]) -> int:
        events = 0
        for path in paths:
            with uproot.open(path) as f:
                for chunk in f["Events"].iterate(selections[path.name].branches, step_size=processor.DEFAULT_CHUNKSIZE):
                    events += len(chunk)
        return events

    def hepvine(paths: list[Path]) -> int:
        events = 0
        analysis_ = agc()
        for path in paths:
            entry = shard_entry(path, "real", entries[path.name], 1.0, REAL_SPEC_ERAS.get(path.name))
            record, _ = driver.run_file(entry, "bench", analysis_)
            if record.failure:
                raise RuntimeError(record.error)
            events += record.events
        return events

    def coffea(paths: list[Path]) -> int:
        return sum(coffea_histogram(path, "real", 1.0, selections[path.name])[1] for path in paths)

    sets = {"as_is": sources, codec: copies}
    variants = {"io_limit": io_limit, "hepvine": hepvine, "coffea": coffea}
    best: dict[str, dict[str, float]] = {name: {} for name in sets}
    for round_ in range(repeat):
        for inputs_name, paths in sets.items():
            for name, fn in variants.items():
                wall, _, read = timed(lambda fn=fn, paths=paths: fn(paths))
                print(
                    f"bench: real files ({inputs_name}), round {round_ + 1}: {name}: {wall:.2f} s, {read} events",
                    flush=True,
                )
                best[inputs_name][name] = min(best[inputs_name].get(name, wall), wall)
    events = sum(entries.values())
    return {
        "what": "every real NanoAOD file, as it is and recompressed, one process, best of the rounds",
        "directory": str(directory),
        "files": len(sources),
        "events": events,
        "rounds": repeat,
        "eras": {name: s.describe() for name, s in selections.items()},
        "inputs": {
            inputs_name: {
                "bytes": sum(p.stat().st_size for p in sets[inputs_name]),
                "seconds": {name: round(wall, 3) for name, wall in walls.items()},
                "rates_hz_per_core": {name: round(events / wall, 1) for name, wall in walls.items()},
                "hepvine_over_coffea": round(walls["coffea"] / walls["hepvine"], 3),
                "hepvine_over_io_limit": round(walls["io_limit"] / walls["hepvine"], 3),
            }
            for inputs_name, walls in best.items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--real",
        type=Path,
        help="instead: the real NanoAOD files of this directory (e.g. "
        "../shared/nanoaod), as they are and recompressed to --codec; writes "
        "results/bench/analysis-real.json",
    )
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--events", type=int, default=100_000, help="events per file")
    parser.add_argument(
        "--schema",
        choices=generate.SCHEMAS,
        default="compact",
        help="of the generated inputs (compact: the rates hepvine plan uses; nanoaod: the real layout)",
    )
    parser.add_argument("--repeat", type=int, default=5, help="rounds; each rate is the best of them")
    parser.add_argument("--codec", default="zstd:5")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    if args.real:
        result = real_files(args.real, args.repeat, args.codec)
        (OUT / "analysis-real.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps({k: result[k] for k in ("files", "events", "inputs")}))
        return 0

    lzma = inputs(args.files, args.events, seed=11, schema=args.schema)
    zstd = [lzma[0].parents[1] / args.codec.replace(":", "-") / p.name for p in lzma]
    zstd[0].parent.mkdir(parents=True, exist_ok=True)
    recompress_wall = recompress_cpu = 0.0
    for source, copy in zip(lzma, zstd):
        wall, cpu, _ = timed(
            lambda source=source, copy=copy: recompress.recompress(
                str(source), copy, recompress.parse_codec(args.codec)
            )
        )
        recompress_wall, recompress_cpu = recompress_wall + wall, recompress_cpu + cpu
    lzma_bytes, zstd_bytes = sum(p.stat().st_size for p in lzma), sum(p.stat().st_size for p in zstd)

    hepvine_counts, coffea_counts = selected_by_hepvine(zstd), {}
    coffea_analysis(zstd, coffea_counts)
    if coffea_counts != hepvine_counts:
        raise SystemExit(f"bench: coffea selects {coffea_counts}, hepvine {hepvine_counts}: not the same selection")

    variants = {
        "io_limit_lzma": lambda: read_only(lzma),
        "io_limit_zstd": lambda: read_only(zstd),
        "hepvine_lzma": lambda: hepvine_analysis(lzma, args.events),
        "hepvine_zstd": lambda: hepvine_analysis(zstd, args.events),
        "coffea_zstd": lambda: coffea_analysis(zstd),
    }
    events = args.files * args.events
    best: dict[str, tuple[float, float]] = {}
    returned: dict[str, object] = {}
    for round_ in range(args.repeat):
        for name, fn in variants.items():
            wall, cpu, returned[name] = timed(fn)
            print(f"bench: round {round_ + 1}: {name}: {events / wall / 1e6:.3f} MHz", flush=True)
            if name not in best or wall < best[name][0]:
                best[name] = (wall, cpu)
    rates = {name: events / wall for name, (wall, _) in best.items()}
    ratios = {
        "zstd_over_lzma": rates["hepvine_zstd"] / rates["hepvine_lzma"],
        "zstd_over_io_limit": rates["hepvine_zstd"] / rates["io_limit_zstd"],
        "hepvine_over_coffea": rates["hepvine_zstd"] / rates["coffea_zstd"],
        "zstd_size_over_lzma": zstd_bytes / lzma_bytes,
    }
    result = {
        "what": "per-core (one process) event rates on the same events, best of the rounds",
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "load_average": os.getloadavg(),
        },
        "events": events,
        "files": args.files,
        "schema": args.schema,
        "codec": args.codec,
        "rounds": args.repeat,
        "selected_events": hepvine_counts,
        "rates_hz_per_core": {name: round(rate, 1) for name, rate in rates.items()},
        "seconds": {name: {"wall": round(w, 3), "cpu": round(c, 3)} for name, (w, c) in best.items()},
        "bytes": {
            "lzma_files": lzma_bytes,
            "zstd_files": zstd_bytes,
            "read_per_event_lzma": round(returned["hepvine_lzma"][1] / events, 1),
            "read_per_event_zstd": round(returned["hepvine_zstd"][1] / events, 1),
        },
        "recompress": {
            "wall_seconds": round(recompress_wall, 2),
            "cpu_seconds": round(recompress_cpu, 2),
            "source_mb_per_s_per_core": round(lzma_bytes / 1e6 / recompress_wall, 2),
            "output_mb_per_s_per_core": round(zstd_bytes / 1e6 / recompress_wall, 2),
            "events_hz_per_core": round(events / recompress_wall, 1),
            "note": "copy every tree and branch, then verify entries and per-branch checksums",
        },
        "ratios": {name: round(value, 3) for name, value in ratios.items()},
        "targets": {
            name: {
                "target": target,
                "measured": round(ratios[name], 3),
                "met": ratios[name] <= target if name == "zstd_size_over_lzma" else ratios[name] >= target,
            }
            for name, target in TARGETS.items()
        },
    }
    name = "analysis.json" if args.schema == "compact" else f"analysis-{args.schema}.json"
    (OUT / name).write_text(json.dumps(result, indent=2) + "\n")
    print(
        json.dumps(
            {
                "rates_hz_per_core": result["rates_hz_per_core"],
                "targets": result["targets"],
                "recompress": result["recompress"],
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
