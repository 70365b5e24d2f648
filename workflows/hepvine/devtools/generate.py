"""A deterministic NanoAOD-like dataset, since no real NanoAOD can be downloaded here: ``hepvine generate``.

Two schemas. ``nanoaod`` has the layout of a real CMS NanoAOD file, described once in
``hepvine.devtools.nanoschema`` (written by benchmarks/extract_nanoschema.py from a Run 2 file of ../shared/nanoaod):
its 1,590 ``Events`` branches in the same order with the same types (unsigned counters, counter-only branches such as
``LHEPdfWeight``), the ``Runs`` and ``LuminosityBlocks`` trees and the ``tag`` string; collision data lacks the
generator branches, as real data does. The branches the analysis reads carry the physics below; every other branch
is drawn from the real file's distribution of its values (fraction true, frequent values or quantiles, rounded to
the mantissa bits NanoAOD keeps), so that the files cost what real ones cost to open and decompress. The CMSSW
framework trees ``MetaData`` and ``ParameterSets`` are not written: their classes have no uproot writer.

``compact`` (the default) is hepvine's own small layout, quick to write, for tests: ``Events`` with the branches the
analysis reads and 64 more (``Jet_filler0``...), ``Runs`` and ``LuminosityBlocks``, and a physics that fills the
selection densely.

Each schema has its own physics unless ``physics`` names the other's: the demo writes the nanoaod layout with the
compact physics (``--schema nanoaod --physics compact``), so that it pays a real file's costs and still fills its
plots (the realistic physics selects 0.16% of ttbar events: 10,000-event files would give plots of a few events).

Compression is LZMA level 9, CMS NanoAOD's default, unless given. The same schema, process, file index and seed
always give the same file content. Processes differ as the physics does: ttbar has many jets and two b jets, W+jets
few jets and rarely a b, t-channel single top one b and a forward jet, and data is a mixture.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import awkward as ak
import numpy as np
import uproot

from hepvine.devtools import nanoschema
from hepvine.model import atomic

SCHEMAS = ("nanoaod", "compact")
# Events per extend(), i.e. per basket of each branch: large chunks, as NanoAOD has; a nanoaod chunk holds ~15 KB
# an event before compression.
CHUNK = {"compact": 100_000, "nanoaod": 10_000}
FILLER_JET = 24  # compact: per-jet branches the analysis does not read
FILLER_LEPTON = 8  # per electron and per muon
FILLER_EVENT = 24  # event-level
DATA_RUN = 297050  # nanoaod collision data: a run of 2017B (hepvine.model.eras decides data's era from its run)
# Generator-level content, absent from collision data (checked against the real data file nano_dimuon.root).
GENERATOR = re.compile(
    r"^n?(Gen|SubGenJet|LHE|HTXS|Pileup_|PSWeight|gen|btagWeight_|L1PreFiringWeight_|"
    r"L1simulation_step)|_(gen\w*|hadronFlavour|partonFlavour|nBHadrons|nCHadrons|fiducialGen\w*)$"
)
CROSS_REFERENCE = re.compile(r"([a-z][A-Za-z0-9]*?)Idx")  # Jet_electronIdx1 -> Electron, GenPart_genPartIdxMother


@dataclass(frozen=True)
class Physics:
    """The objects the analysis reads: jets above 15 GeV (pt = 15 + exponential), the first ``b_jets`` of each event
    b jets; per lepton flavour one prompt lepton with probability lepton_prob / 2, plus a second one in 8% of
    events (pt = 10 + exponential)."""

    jets_mean: float  # mean number of jets (Poisson)
    jet_pt_scale: float  # GeV, light jets
    b_pt_scale: float  # GeV, b jets
    jet_eta_width: float  # Gaussian width of jet eta
    jet_ids: tuple[tuple[int, float], ...]  # Jet_jetId values and their frequencies (bit 2: TightLeptonVeto)
    b_jets: int  # b-quark jets per event, at most
    b_tag_eff: float  # chance a b jet passes btagCSVV2 > 0.5
    mistag: float  # chance a light jet does
    lepton_prob: float  # chance of one prompt lepton
    lepton_pt_scale: float  # GeV


def compact(jets_mean: float, b_jets: int, b_tag_eff: float, lepton_prob: float) -> Physics:
    """The compact schema's physics: hard jets and leptons, so that small test files fill the selection."""
    return Physics(jets_mean, 40, 52, 1.6, ((2, 0.08), (6, 0.92)), b_jets, b_tag_eff, 0.03, lepton_prob, 35)


def realistic(jets_mean: float, b_jets: int, b_tag_eff: float, lepton_prob: float) -> Physics:
    """The nanoaod schema's physics, matched to the AGC's real 2015 ttbar file (nanoAOD_2015_CMS_Open_Data_ttbar:
    jets above 15 GeV with a third above 30 GeV, |eta| up to 5, jet ID 0/2/6 in 9/11/80%, 6.6% of light jets above
    the CSVV2 cut, electron pt median 24 GeV; 7% of its events have one selected lepton, 1% four selected jets):
    tests/workflow/test_generate.py compares the selection's stages. Generated ttbar: 7.7%, 2.5%, 0.16% selected."""
    return Physics(jets_mean, 13, 40, 2.2, ((0, 0.09), (2, 0.11), (6, 0.80)), b_jets, b_tag_eff, 0.066, lepton_prob, 22)


@dataclass(frozen=True)
class Process:
    compact: Physics
    nanoaod: Physics
    xsec_pb: float | None  # None for data


PROCESSES = {
    "ttbar": Process(compact(5.5, 2, 0.7, 0.45), realistic(4.5, 2, 0.6, 0.3), xsec_pb=729.84),
    "wjets": Process(compact(2.2, 0, 0.0, 0.75), realistic(2.5, 0, 0.0, 0.45), xsec_pb=15487.16),
    "single_top_t_chan": Process(compact(3.2, 1, 0.7, 0.6), realistic(3.0, 1, 0.6, 0.35), xsec_pb=84.69),
    "data": Process(compact(3.5, 1, 0.5, 0.55), realistic(3.0, 1, 0.5, 0.3), xsec_pb=None),
}


def seed_for(process: str, index: int, seed: int) -> int:
    digest = hashlib.sha256(f"{process}/{index}/{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def objects(p: Physics, n: int, rng: np.random.Generator) -> dict[str, tuple[np.ndarray, dict[str, np.ndarray]]]:
    """The jets, electrons and muons of N events: collection -> (objects per event, field -> flat values)."""
    njet = rng.poisson(p.jets_mean, n).astype(np.int64)
    total = int(njet.sum())
    index_in_event = np.arange(total) - np.repeat(np.cumsum(njet) - njet, njet)
    is_b = index_in_event < p.b_jets
    tagged = np.where(is_b, rng.random(total) < p.b_tag_eff, rng.random(total) < p.mistag)
    ids, frequencies = zip(*p.jet_ids)
    jets = {
        "pt": (15 + rng.exponential(np.where(is_b, p.b_pt_scale, p.jet_pt_scale), total)).astype(np.float32),
        "eta": rng.normal(0, p.jet_eta_width, total).astype(np.float32),
        "phi": rng.uniform(-np.pi, np.pi, total).astype(np.float32),
        "mass": rng.uniform(2, 20, total).astype(np.float32),
        "btagCSVV2": np.where(tagged, rng.uniform(0.5, 1.0, total), rng.uniform(0.0, 0.5, total)).astype(np.float32),
        "jetId": rng.choice(np.array(ids, dtype=np.int32), total, p=frequencies),
    }

    def leptons(pdg: int, specific: dict) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        counts = (rng.random(n) < p.lepton_prob / 2).astype(np.int64) + (rng.random(n) < 0.08)
        m = int(counts.sum())
        charge = rng.choice(np.array([-1, 1], dtype=np.int32), m)
        return counts, {
            "pt": (10 + rng.exponential(p.lepton_pt_scale, m)).astype(np.float32),
            "eta": rng.normal(0, 1.3, m).astype(np.float32),
            "phi": rng.uniform(-np.pi, np.pi, m).astype(np.float32),
            "mass": np.full(m, 0.000511 if pdg == 11 else 0.10566, dtype=np.float32),
            "charge": charge,
            "pdgId": (-pdg * charge).astype(np.int32),
            "sip3d": rng.exponential(2.0, m).astype(np.float32),
            **{name: make(m) for name, make in specific.items()},
        }

    electrons = leptons(
        11,
        {"cutBased": lambda m: rng.choice(np.array([0, 1, 2, 3, 4], dtype=np.int32), m, p=[0.1, 0.1, 0.15, 0.2, 0.45])},
    )
    muons = leptons(
        13,
        {
            "tightId": lambda m: rng.random(m) < 0.8,
            "pfRelIso04_all": lambda m: rng.exponential(0.08, m).astype(np.float32),
        },
    )
    return {"Jet": (njet, jets), "Electron": electrons, "Muon": muons}


def event_ids(n: int, first_event: int) -> dict[str, np.ndarray]:
    return {
        "luminosityBlock": (1 + (first_event + np.arange(n)) // 1000).astype(np.uint32),
        "event": (first_event + np.arange(n) + 1).astype(np.uint64),
    }


def events(process: str, n: int, rng: np.random.Generator, first_event: int, physics: str = "compact") -> dict:
    """One chunk of N events of PROCESS in the compact schema as branch name -> array (collections as awkward
    records), with the physics of the schema PHYSICS."""
    p = PROCESSES[process]
    out = {
        "run": np.full(n, 1, dtype=np.uint32),
        **event_ids(n, first_event),
        "genWeight": (np.ones(n) if p.xsec_pb is None else rng.normal(1.0, 0.05, n)).astype(np.float32),
    }
    for name, (counts, fields) in objects(getattr(p, physics), n, rng).items():
        total = int(counts.sum())
        filler = FILLER_JET if name == "Jet" else FILLER_LEPTON
        fields |= {f"filler{i}": rng.normal(0, 1, total).astype(np.float32) for i in range(filler)}
        out[name] = ak.unflatten(ak.zip(fields), counts)
    for i in range(FILLER_EVENT):
        out[f"Misc_f{i}"] = rng.normal(0, 1, n).astype(np.float32)
    return out


def sample(summary: tuple, dtype: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """SIZE values drawn from a branch's SUMMARY (hepvine.devtools.nanoschema) as numpy type DTYPE."""
    kind = summary[0]
    if kind == "p":
        return rng.random(size) < summary[1]
    if kind == "v" and not summary[1]:  # never filled in the real file (its collection was always empty)
        return np.zeros(size, dtype=dtype)
    if kind == "v":
        values, frequencies = zip(*summary[1])
        p = np.asarray(frequencies, dtype=np.float64)
        return rng.choice(np.asarray(values), size, p=p / p.sum()).astype(dtype)
    values = np.interp(rng.random(size), nanoschema.QUANTILES, summary[1])
    if np.dtype(dtype).kind in "iu":
        return np.rint(values).astype(dtype)
    return rounded(values, summary).astype(dtype)


def rounded(values: np.ndarray, summary: tuple) -> np.ndarray:
    """VALUES as float32 keeping the mantissa bits that the real branch of SUMMARY keeps (NanoAOD rounds most
    floats to 10-16 bits, which is much of why it compresses as it does)."""
    values = np.asarray(values, dtype=np.float32)
    bits = summary[2] if summary[0] == "q" else None
    if bits is None or bits >= 23:
        return values
    mask = np.uint32(0xFFFFFFFF ^ ((1 << (23 - bits)) - 1))
    return (values.view(np.uint32) & mask).view(np.float32)


def schema_branches(tree: str, data: bool) -> list[tuple]:
    """The branches of TREE in the nanoaod schema; collision data has no generator-level branches."""
    return [b for b in nanoschema.TREES[tree] if not (data and GENERATOR.search(b[0]))]


def jagged(counts: np.ndarray, values: np.ndarray) -> ak.Array:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return ak.Array(ak.contents.ListOffsetArray(ak.index.Index64(offsets), ak.contents.NumpyArray(values)))


def referenced(
    values: np.ndarray, field: str, counts: dict[str, np.ndarray], own: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """A cross-reference field (``Jet_electronIdx1``...) whose drawn VALUES are -1 or an index: the indices are
    redrawn within the referenced collection's objects of the same event, so that they point at objects that exist."""
    match = CROSS_REFERENCE.match(field)
    target = match and "n" + ("SV" if match[1] == "sv" else match[1][0].upper() + match[1][1:])
    if target not in counts:
        return values
    available = np.repeat(counts[target], own)
    pick = np.floor(rng.random(len(values)) * available).astype(values.dtype)
    return np.where((values >= 0) & (available > 0), pick, -1).astype(values.dtype)


def nanoaod_events(
    process: str, n: int, rng: np.random.Generator, first_event: int, physics: str = "nanoaod"
) -> dict[str, object]:
    """One chunk of N events of PROCESS in the nanoaod schema, with the physics of the schema PHYSICS: branch name ->
    numpy or (jagged) awkward array."""
    p = PROCESSES[process]
    data = p.xsec_pb is None
    branches = schema_branches("Events", data)
    made = objects(getattr(p, physics), n, rng)
    counts = {}
    for name, _dtype, counter, summary in branches:
        if counter == "counter":
            collection = made.get(name[1:])
            counts[name] = collection[0] if collection else np.maximum(sample(summary, "i8", n, rng), 0)
    fixed = {"run": np.full(n, DATA_RUN if data else 1, dtype=np.uint32), **event_ids(n, first_event)}
    out: dict[str, object] = {}
    for name, dtype, counter, summary in branches:
        if counter == "counter":
            out[name] = counts[name].astype(dtype)
        elif counter is None:
            out[name] = fixed[name] if name in fixed else sample(summary, dtype, n, rng)
        else:
            own = counts[counter]
            field = name.partition("_")[2]
            values = made.get(counter[1:], (None, {}))[1].get(field)
            if values is not None:
                values = rounded(values, summary) if values.dtype == np.float32 else values
            else:
                values = referenced(sample(summary, dtype, int(own.sum()), rng), field, counts, own, rng)
            out[name] = jagged(own, values.astype(dtype))
    return out


def _unsigned_counters(tree, counters: dict[str, str]) -> None:
    """Make the counters of TREE that COUNTERS (name -> numpy type) says are unsigned uint32, as CMSSW writes them:
    uproot 5.7's mktree makes every counter int32. This changes uproot's own record of the branch before the first
    extend() rewrites the tree's metadata (test_generate checks the types uproot and ROOT then read)."""
    cascading = tree._cascading
    for datum in cascading._branch_data:
        if datum.get("kind") == "counter" and np.dtype(counters[datum["fName"]]).kind == "u":
            datum["dtype"] = np.dtype(counters[datum["fName"]]).newbyteorder(">")
            datum["fTitle"] = datum["fTitle"].replace("/I", "/i")
    cascading._needs_relocation_before_extend = True  # write the whole metadata anew at the first extend()


def make_tree(f, name: str, branches: list[tuple], baskets: int = 1):
    """An empty TTree NAME of F with BRANCHES of the nanoaod schema, in their order and with their types, with room
    for BASKETS extend()s (uproot rewrites a tree's metadata, which takes ~25 s for 1,600 branches, when it runs out
    of room)."""
    types = {b: (t if counter in (None, "counter") else f"var * {np.dtype(t).name}") for b, t, counter, _ in branches}
    counter_of = {b: counter for b, _, counter, _ in branches if counter not in (None, "counter")}
    tree = f.mktree(name, types, counter_name=counter_of.__getitem__, initial_basket_capacity=baskets + 2)
    _unsigned_counters(tree, {b: t for b, t, counter, _ in branches if counter == "counter"})
    return tree


def write_nanoaod(f, process: str, n_events: int, first_event: int, rng: np.random.Generator, physics: str) -> None:
    """The trees and ``tag`` of a nanoaod-schema file of N_EVENTS events with the physics of the schema PHYSICS into
    the open file F."""
    data = PROCESSES[process].xsec_pb is None
    f["tag"] = nanoschema.TAG
    events_tree = make_tree(f, "Events", schema_branches("Events", data), -(-n_events // CHUNK["nanoaod"]))
    sumw = sumw2 = 0.0
    for start in range(0, n_events, CHUNK["nanoaod"]):
        chunk = nanoaod_events(process, min(CHUNK["nanoaod"], n_events - start), rng, first_event + start, physics)
        events_tree.extend(chunk)
        if not data:
            weights = chunk["genWeight"].astype(np.float64)
            sumw, sumw2 = sumw + weights.sum(), sumw2 + (weights**2).sum()
    run = DATA_RUN if data else 1
    runs = schema_branches("Runs", data)
    fixed = {
        "run": np.array([run], dtype=np.uint32),
        "genEventCount": np.array([n_events], dtype=np.int64),
        "genEventSumw": np.array([sumw]),
        "genEventSumw2": np.array([sumw2]),
    }
    summaries, values = {name: summary for name, _, _, summary in runs}, {}
    for name, dtype, counter, summary in runs:  # the sums of LHE weights: as many as the real file has, near 1
        if counter not in (None, "counter"):
            count = sample(summaries[counter], "i8", 1, rng)
            values[counter], values[name] = count, jagged(count, sample(summary, dtype, int(count[0]), rng))
    make_tree(f, "Runs", runs).extend({name: fixed.get(name, values.get(name)) for name, *_ in runs})
    lumis = np.unique(event_ids(n_events, first_event)["luminosityBlock"])
    make_tree(f, "LuminosityBlocks", schema_branches("LuminosityBlocks", data)).extend(
        {"run": np.full(len(lumis), run, dtype=np.uint32), "luminosityBlock": lumis}
    )


def write_compact(f, process: str, n_events: int, first_event: int, rng: np.random.Generator, physics: str) -> None:
    """The trees of a compact-schema file of N_EVENTS events with the physics of the schema PHYSICS into the open
    file F."""
    tree = None
    for start in range(0, n_events, CHUNK["compact"]):
        chunk = events(process, min(CHUNK["compact"], n_events - start), rng, first_event + start, physics)
        if tree is None:
            tree = f.mktree("Events", {name: branch_type(value) for name, value in chunk.items()})
        tree.extend(chunk)
    lumis = np.unique(event_ids(n_events, first_event)["luminosityBlock"])
    f.mktree("LuminosityBlocks", {"run": np.uint32, "luminosityBlock": np.uint32})
    f["LuminosityBlocks"].extend({"run": np.ones(len(lumis), dtype=np.uint32), "luminosityBlock": lumis})
    f.mktree("Runs", {"run": np.uint32, "genEventCount": np.int64, "genEventSumw": np.float64})
    f["Runs"].extend(
        {
            "run": np.array([1], dtype=np.uint32),
            "genEventCount": np.array([n_events]),
            "genEventSumw": np.array([float(n_events)]),
        }
    )


WRITERS = {"nanoaod": write_nanoaod, "compact": write_compact}


def write_file(
    path: Path,
    process: str,
    n_events: int,
    index: int = 0,
    seed: int = 1,
    compression=None,
    schema: str = "compact",
    physics: str | None = None,
) -> dict:
    """Write one file of SCHEMA (``nanoaod`` or ``compact``) with the physics of the schema PHYSICS (default: SCHEMA's
    own); returns its entry for a dataset spec (``path``, ``nevts``)."""
    if process not in PROCESSES:
        raise ValueError(f"unknown process {process!r}: choose one of {', '.join(PROCESSES)}")
    physics = physics or schema
    for what, value in (("schema", schema), ("physics", physics)):
        if value not in WRITERS:
            raise ValueError(f"unknown {what} {value!r}: choose one of {', '.join(SCHEMAS)}")
    rng = np.random.default_rng(seed_for(process, index, seed))
    with atomic.replacing(path) as tmp, uproot.recreate(tmp, compression=compression or uproot.LZMA(9)) as f:
        WRITERS[schema](f, process, n_events, index * 10_000_000, rng, physics)
    return {"path": str(path), "nevts": n_events}


def branch_type(value):
    """What uproot's mktree needs for VALUE: an awkward collection's list type, or a numpy dtype."""
    return value.type.content if isinstance(value, ak.Array) else value.dtype


def generate(
    outdir: Path,
    files_per_process: dict[str, int],
    events_per_file: int,
    seed: int = 1,
    path_prefix: str | None = None,
    schema: str = "compact",
    physics: str | None = None,
    compression=None,
) -> dict:
    """Write a dataset; returns its spec in the Analysis Grand Challenge shape (plus ``xsec``). PATH_PREFIX, if
    given, replaces OUTDIR in the spec's paths (e.g. the ``root://`` URL that will serve them)."""
    spec: dict = {}
    for process, nfiles in files_per_process.items():
        entries = []
        for i in range(nfiles):
            local = outdir / process / f"{process}_{i:04d}.root"
            entry = write_file(
                local,
                process,
                events_per_file,
                index=i,
                seed=seed,
                compression=compression,
                schema=schema,
                physics=physics,
            )
            if path_prefix:
                entry["path"] = f"{path_prefix.rstrip('/')}/{process}/{local.name}"
            entries.append(entry)
        nominal = {"nevts_total": sum(e["nevts"] for e in entries), "files": entries}
        spec[process] = {"nominal": nominal}
        if PROCESSES[process].xsec_pb is not None:
            spec[process]["xsec"] = PROCESSES[process].xsec_pb
    return spec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hepvine generate", description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path, help="directory for the files (one subdirectory per process)")
    parser.add_argument("--files", type=int, default=5, help="files per process (default 5)")
    parser.add_argument("--events", type=int, default=50_000, help="events per file (default 50000)")
    parser.add_argument("--processes", default=",".join(PROCESSES), help="comma-separated processes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--schema",
        choices=SCHEMAS,
        default="compact",
        help="compact: hepvine's own 94 branches, quick to write (~60 s per 100,000 events; default); "
        "nanoaod: the layout of a real NanoAOD file, 1,590 branches, what real files cost to "
        "open and decompress (one core: ~11 s a file plus ~5 ms an event at LZMA-9, ~1.1 ms at "
        "LZMA-1)",
    )
    parser.add_argument(
        "--lzma-level",
        type=int,
        choices=range(1, 10),
        default=9,
        metavar="1-9",
        help="LZMA level of the files (default 9, CMS NanoAOD's; LZMA reads as fast at any level, "
        "level 1 writes ~4x faster)",
    )
    parser.add_argument(
        "--physics",
        choices=SCHEMAS,
        help="the physics of which schema (default: the --schema's own): compact fills the selection "
        "densely; nanoaod matches the AGC's real ttbar file (0.16%% of ttbar events selected)",
    )
    parser.add_argument("--path-prefix", help="prefix of the paths written to the spec, e.g. root://host//store/x")
    parser.add_argument("--spec", type=Path, help="write the dataset spec (JSON) here")
    args = parser.parse_args(argv)
    processes = [p.strip() for p in args.processes.split(",") if p.strip()]
    unknown = sorted(set(processes) - set(PROCESSES))
    if unknown:
        parser.error(f"unknown process(es) {', '.join(unknown)}: choose from {', '.join(PROCESSES)}")
    spec = generate(
        args.outdir,
        {p: args.files for p in processes},
        args.events,
        args.seed,
        args.path_prefix,
        args.schema,
        args.physics,
        uproot.LZMA(args.lzma_level),
    )
    text = json.dumps(spec, indent=2) + "\n"
    if args.spec:
        args.spec.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
