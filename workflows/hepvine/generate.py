"""A deterministic NanoAOD-like dataset, since no real NanoAOD can be downloaded here: ``hepvine generate``.

Each file has the TTree ``Events`` with the branches the analysis reads (``run``, ``luminosityBlock``, ``event``,
``genWeight``, ``nJet`` + ``Jet_{pt,eta,phi,mass,btagCSVV2,jetId}``, ``nElectron`` + ``Electron_{pt,eta,phi,
cutBased,sip3d,charge,mass,pdgId}``, ``nMuon`` + ``Muon_{pt,eta,phi,tightId,sip3d,pfRelIso04_all,charge,mass,
pdgId}``) and 64 more that it does not read, so that it reads well under half of the bytes; plus the ``Runs`` and
``LuminosityBlocks`` trees. Compression is LZMA level 9, CMS NanoAOD's default. The same process, file index and
seed always give the same file content.

Processes differ as the physics does: ttbar has many jets and two b jets, W+jets few jets and rarely a b, t-channel
single top one b and a forward jet, and data is a mixture.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import awkward as ak
import numpy as np
import uproot

from hepvine import atomic

EVENTS_PER_BASKET = 100_000  # one basket per branch per extend(): large chunks, as NanoAOD has
FILLER_JET = 24  # per-jet branches the analysis does not read
FILLER_LEPTON = 8  # per electron and per muon
FILLER_EVENT = 24  # event-level


@dataclass(frozen=True)
class Process:
    jets_mean: float  # mean number of jets (Poisson)
    b_jets: int  # b-quark jets per event, at most
    b_tag_eff: float  # chance a b jet passes btagCSVV2 > 0.5
    lepton_prob: float  # chance of one prompt lepton
    xsec_pb: float | None  # None for data


PROCESSES = {
    "ttbar": Process(jets_mean=5.5, b_jets=2, b_tag_eff=0.7, lepton_prob=0.45, xsec_pb=729.84),
    "wjets": Process(jets_mean=2.2, b_jets=0, b_tag_eff=0.0, lepton_prob=0.75, xsec_pb=15487.16),
    "single_top_t_chan": Process(jets_mean=3.2, b_jets=1, b_tag_eff=0.7, lepton_prob=0.6, xsec_pb=84.69),
    "data": Process(jets_mean=3.5, b_jets=1, b_tag_eff=0.5, lepton_prob=0.55, xsec_pb=None),
}


def seed_for(process: str, index: int, seed: int) -> int:
    digest = hashlib.sha256(f"{process}/{index}/{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def events(process: str, n: int, rng: np.random.Generator, first_event: int) -> dict:
    """One chunk of N events of PROCESS as branch name → array (collections as awkward records)."""
    p = PROCESSES[process]
    njet = rng.poisson(p.jets_mean, n).astype(np.int64)
    # Jets: falling pt spectrum above 15 GeV; the first min(b_jets, njet) are b jets.
    total = int(njet.sum())
    index_in_event = (np.arange(total) - np.repeat(np.cumsum(njet) - njet, njet))
    is_b = index_in_event < p.b_jets
    tagged = np.where(is_b, rng.random(total) < p.b_tag_eff, rng.random(total) < 0.03)
    btag = np.where(tagged, rng.uniform(0.5, 1.0, total), rng.uniform(0.0, 0.5, total)).astype(np.float32)
    jets = {
        "pt": (15 + rng.exponential(40, total) * np.where(is_b, 1.3, 1.0)).astype(np.float32),
        "eta": rng.normal(0, 1.6, total).astype(np.float32),
        "phi": rng.uniform(-np.pi, np.pi, total).astype(np.float32),
        "mass": rng.uniform(2, 20, total).astype(np.float32),
        "btagCSVV2": btag,
        "jetId": rng.choice(np.array([2, 6], dtype=np.int32), total, p=[0.08, 0.92]),
        **{f"filler{i}": rng.normal(0, 1, total).astype(np.float32) for i in range(FILLER_JET)},
    }
    jet = ak.unflatten(ak.zip(jets), njet)

    def leptons(pdg: int, prob: float, specific: dict) -> ak.Array:
        counts = (rng.random(n) < prob).astype(np.int64) + (rng.random(n) < 0.08)
        m = int(counts.sum())
        charge = rng.choice(np.array([-1, 1], dtype=np.int32), m)
        fields = {
            "pt": (10 + rng.exponential(35, m)).astype(np.float32),
            "eta": rng.normal(0, 1.3, m).astype(np.float32),
            "phi": rng.uniform(-np.pi, np.pi, m).astype(np.float32),
            "mass": np.full(m, 0.000511 if pdg == 11 else 0.10566, dtype=np.float32),
            "charge": charge,
            "pdgId": (-pdg * charge).astype(np.int32),
            "sip3d": rng.exponential(2.0, m).astype(np.float32),
            **{name: make(rng, m) for name, make in specific.items()},
            **{f"filler{i}": rng.normal(0, 1, m).astype(np.float32) for i in range(FILLER_LEPTON)},
        }
        return ak.unflatten(ak.zip(fields), counts)

    electron = leptons(11, p.lepton_prob / 2, {
        "cutBased": lambda r, m: r.choice(np.array([0, 1, 2, 3, 4], dtype=np.int32), m,
                                          p=[0.1, 0.1, 0.15, 0.2, 0.45]),
    })
    muon = leptons(13, p.lepton_prob / 2, {
        "tightId": lambda r, m: r.random(m) < 0.8,
        "pfRelIso04_all": lambda r, m: r.exponential(0.08, m).astype(np.float32),
    })
    out = {
        "run": np.full(n, 1, dtype=np.uint32),
        "luminosityBlock": (1 + (first_event + np.arange(n)) // 1000).astype(np.uint32),
        "event": (first_event + np.arange(n) + 1).astype(np.uint64),
        "genWeight": (np.ones(n) if p.xsec_pb is None else rng.normal(1.0, 0.05, n)).astype(np.float32),
        "Jet": jet,
        "Electron": electron,
        "Muon": muon,
    }
    for i in range(FILLER_EVENT):
        out[f"Misc_f{i}"] = rng.normal(0, 1, n).astype(np.float32)
    return out


def write_file(path: Path, process: str, n_events: int, index: int = 0, seed: int = 1,
               compression=None) -> dict:
    """Write one file; returns its entry for a dataset spec (``path``, ``nevts``)."""
    if process not in PROCESSES:
        raise ValueError(f"unknown process {process!r}: choose one of {', '.join(PROCESSES)}")
    rng = np.random.default_rng(seed_for(process, index, seed))
    with atomic.replacing(path) as tmp, uproot.recreate(tmp, compression=compression or uproot.LZMA(9)) as f:
        tree = None
        for start in range(0, n_events, EVENTS_PER_BASKET):
            chunk = events(process, min(EVENTS_PER_BASKET, n_events - start), rng, index * 10_000_000 + start)
            if tree is None:
                tree = f.mktree("Events", {name: branch_type(value) for name, value in chunk.items()})
            tree.extend(chunk)
        lumis = np.unique((1 + (index * 10_000_000 + np.arange(n_events)) // 1000).astype(np.uint32))
        f.mktree("LuminosityBlocks", {"run": np.uint32, "luminosityBlock": np.uint32})
        f["LuminosityBlocks"].extend({"run": np.ones(len(lumis), dtype=np.uint32), "luminosityBlock": lumis})
        f.mktree("Runs", {"run": np.uint32, "genEventCount": np.int64, "genEventSumw": np.float64})
        f["Runs"].extend({"run": np.array([1], dtype=np.uint32), "genEventCount": np.array([n_events]),
                          "genEventSumw": np.array([float(n_events)])})
    return {"path": str(path), "nevts": n_events}


def branch_type(value):
    """What uproot's mktree needs for VALUE: an awkward collection's list type, or a numpy dtype."""
    return value.type.content if isinstance(value, ak.Array) else value.dtype


def generate(outdir: Path, files_per_process: dict[str, int], events_per_file: int, seed: int = 1,
             path_prefix: str | None = None) -> dict:
    """Write a dataset; returns its spec in the Analysis Grand Challenge shape (plus ``xsec``). PATH_PREFIX, if
    given, replaces OUTDIR in the spec's paths (e.g. the ``root://`` URL that will serve them)."""
    spec: dict = {}
    for process, nfiles in files_per_process.items():
        entries = []
        for i in range(nfiles):
            local = outdir / process / f"{process}_{i:04d}.root"
            entry = write_file(local, process, events_per_file, index=i, seed=seed)
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
    parser.add_argument("--path-prefix", help="prefix of the paths written to the spec, e.g. root://host//store/x")
    parser.add_argument("--spec", type=Path, help="write the dataset spec (JSON) here")
    args = parser.parse_args(argv)
    processes = [p.strip() for p in args.processes.split(",") if p.strip()]
    unknown = sorted(set(processes) - set(PROCESSES))
    if unknown:
        parser.error(f"unknown process(es) {', '.join(unknown)}: choose from {', '.join(PROCESSES)}")
    spec = generate(args.outdir, {p: args.files for p in processes}, args.events, args.seed, args.path_prefix)
    text = json.dumps(spec, indent=2) + "\n"
    if args.spec:
        args.spec.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
