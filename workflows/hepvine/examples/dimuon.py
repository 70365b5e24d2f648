"""A dimuon mass spectrum, the first analysis of many a physicist: events with two opposite-charge muons (pt > 10 GeV,
|eta| < 2.4, loose ID where the file has it), their invariant mass in a log-binned histogram per dataset, and the
events and selected pairs counted. Written as a coffea user writes it (NanoAODSchema collections and their
four-vector behaviour): it runs on any NanoAOD with muons, Run 2 or Run 3, TTree or RNTuple.
"""

from __future__ import annotations

import awkward as ak
import hist
from coffea import processor


class DimuonProcessor(processor.ProcessorABC):
    """Opposite-charge dimuon mass per dataset: ``{dataset: {"mass": Hist, "events": n, "pairs": n}}``."""

    def __init__(self, pt_min: float = 10.0):
        self.pt_min = pt_min

    def process(self, events):
        dataset = events.metadata["dataset"]
        muons = events.Muon
        good = (muons.pt > self.pt_min) & (abs(muons.eta) < 2.4)
        if "looseId" in muons.fields:
            good = good & muons.looseId
        muons = muons[good]
        pairs = muons[ak.num(muons) == 2]
        pairs = pairs[ak.sum(pairs.charge, axis=1) == 0]
        mass = (pairs[:, 0] + pairs[:, 1]).mass
        h = hist.Hist(
            hist.axis.Regular(
                60, 0.5, 200.0, transform=hist.axis.transform.log, name="mass", label=r"$m_{\mu\mu}$ [GeV]"
            ),
            storage=hist.storage.Weight(),
        )
        h.fill(mass=ak.to_numpy(mass))
        return {dataset: {"mass": h, "events": len(events), "pairs": len(mass)}}

    def postprocess(self, accumulator):
        return accumulator
