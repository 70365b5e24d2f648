"""The per-file analysis: the Analysis Grand Challenge CMS ttbar selection, columnar with uproot and awkward.

Objects: electrons (pt > 30, |eta| < 2.1, cutBased == 4, sip3d < 4), muons (pt > 30, |eta| < 2.1, tightId,
sip3d < 4, pfRelIso04_all < 0.15), jets (pt > 30, |eta| < 2.4, jetId & 4), b tag btagCSVV2 > 0.5. Events: exactly
one selected lepton and at least four selected jets. Regions: ``4j1b`` (exactly one b-tagged jet; observable HT,
the scalar sum of selected-jet pt) and ``4j2b`` (two or more; observable the mass of the three-jet combination with
at least one b tag and the largest vector-sum pt). Variations: ``nominal`` and ``pt_scale_up`` (every jet pt × 1.03
before the selection). Histograms: Reg(25, 50, 550) GeV, StrCat region/process/variation, Weight() storage.
"""

from __future__ import annotations

import awkward as ak
import hist
import numpy as np

BRANCHES = [
    "Jet_pt", "Jet_eta", "Jet_phi", "Jet_mass", "Jet_btagCSVV2", "Jet_jetId",
    "Electron_pt", "Electron_eta", "Electron_cutBased", "Electron_sip3d",
    "Muon_pt", "Muon_eta", "Muon_tightId", "Muon_sip3d", "Muon_pfRelIso04_all",
]
REGIONS = ("4j1b", "4j2b")
VARIATIONS = {"nominal": 1.0, "pt_scale_up": 1.03}
BTAG_CUT = 0.5


def new_histogram() -> hist.Hist:
    return hist.Hist(
        hist.axis.StrCategory(list(REGIONS), name="region"),
        hist.axis.StrCategory([], name="process", growth=True),
        hist.axis.StrCategory(list(VARIATIONS), name="variation"),
        hist.axis.Regular(25, 50, 550, name="observable", label="observable [GeV]"),
        storage=hist.storage.Weight(),
    )


def _p4(jets: ak.Array) -> tuple:
    px = jets.pt * np.cos(jets.phi)
    py = jets.pt * np.sin(jets.phi)
    pz = jets.pt * np.sinh(jets.eta)
    energy = np.sqrt(px**2 + py**2 + pz**2 + jets.mass**2)
    return px, py, pz, energy


def observables(events: dict, pt_scale: float = 1.0) -> dict[str, ak.Array]:
    """Per region, the observable of each selected event (a flat array), for jet pt scaled by PT_SCALE."""
    jets = ak.zip({
        "pt": events["Jet_pt"] * pt_scale, "eta": events["Jet_eta"], "phi": events["Jet_phi"],
        "mass": events["Jet_mass"], "btag": events["Jet_btagCSVV2"], "id": events["Jet_jetId"],
    })
    electrons = ((events["Electron_pt"] > 30) & (abs(events["Electron_eta"]) < 2.1)
                 & (events["Electron_cutBased"] == 4) & (events["Electron_sip3d"] < 4))
    muons = ((events["Muon_pt"] > 30) & (abs(events["Muon_eta"]) < 2.1) & events["Muon_tightId"]
             & (events["Muon_sip3d"] < 4) & (events["Muon_pfRelIso04_all"] < 0.15))
    jets = jets[(jets.pt > 30) & (abs(jets.eta) < 2.4) & ((jets.id & 4) != 0)]
    nbtag = ak.sum(jets.btag > BTAG_CUT, axis=1)
    selected = ((ak.sum(electrons, axis=1) + ak.sum(muons, axis=1)) == 1) & (ak.num(jets) >= 4)

    one_b = jets[selected & (nbtag == 1)]
    ht = ak.sum(one_b.pt, axis=1)

    two_b = jets[selected & (nbtag >= 2)]
    trijet = ak.combinations(two_b, 3, fields=["a", "b", "c"])
    parts = [_p4(trijet[k]) for k in ("a", "b", "c")]
    px, py, pz, energy = (sum(p[i] for p in parts) for i in range(4))
    trijet_pt = np.sqrt(px**2 + py**2)
    has_b = (trijet.a.btag > BTAG_CUT) | (trijet.b.btag > BTAG_CUT) | (trijet.c.btag > BTAG_CUT)
    candidate_pt = ak.where(has_b, trijet_pt, -1.0)
    best = ak.argmax(candidate_pt, axis=1, keepdims=True)
    mass = np.sqrt(np.maximum(energy**2 - px**2 - py**2 - pz**2, 0))
    m3 = ak.flatten(mass[best])
    return {"4j1b": ak.to_numpy(ht), "4j2b": ak.to_numpy(m3)}


def fill(h: hist.Hist, events: dict, process: str, weight: float) -> dict[str, int]:
    """Fill H with EVENTS of PROCESS for every region and variation; returns the nominal count per region."""
    counts = {}
    for variation, scale in VARIATIONS.items():
        for region, values in observables(events, scale).items():
            h.fill(region=region, process=process, variation=variation, observable=values,
                   weight=np.full(len(values), weight))
            if variation == "nominal":
                counts[region] = len(values)
    return counts


def event_weight(xsec_pb: float | None, lumi_pb: float, nevts_total: int) -> float:
    """xsec × lumi / nevts_total for simulation; 1 for data (no xsec)."""
    return 1.0 if xsec_pb is None else xsec_pb * lumi_pb / nevts_total
