"""The Analysis Grand Challenge CMS ttbar selection as a coffea processor (``TtbarProcessor``), columnar with numpy
on the flat branches (read through NanoEvents of any schema: ``BaseSchema`` or ``NanoAODSchema``).

Its output has today's histograms.root names: one 1-D histogram ``<region>_<process>_<variation>`` for each region and
histogram variation a sample fills, and ``events_<process>_<variation>`` (one bin: the events analysed). The sample's
``process``, ``variation``, ``xsec``, ``nevts_total`` and ``era`` come from ``events.metadata`` (what hepvine puts
there for an AGC spec; a fileset gives them as its datasets' metadata); ``lumi_pb`` is the processor's argument.

Objects: electrons (pt > 30, |eta| < 2.1, cutBased == 4, sip3d < 4), muons (pt > 30, |eta| < 2.1, tightId,
sip3d < 4, pfRelIso04_all < 0.15), jets (pt > 30, |eta| < 2.4, TightLeptonVeto jet ID), b tag: the era's
discriminant > its working point (Run 2: btagCSVV2 > 0.5; the era's choices are in ``hepvine.model.eras``). Events:
exactly one selected lepton and at least four selected jets. Regions: ``4j1b`` (exactly one b-tagged jet; observable
HT, the scalar sum of selected-jet pt) and ``4j2b`` (two or more; observable the mass of the three-jet combination
with at least one b tag and the largest vector-sum pt). Weights: xsec × lumi / nevts_total for simulation, 1 for
data (never scaled). Histograms: Reg(25, 50, 550) GeV, StrCat region/process/variation, Weight() storage.

The variation axis holds the AGC's names. What a file fills depends on its spec sample (``variations``):
- a simulated **nominal** sample fills ``nominal``; ``pt_scale_up`` (every jet pt × 1.03 before the selection);
  ``btag_var_<i>_up``/``_down`` for i = 0..3 (the nominal selection, weight × (1 ± 0.075 × pt_i / 50), pt_i the pt of
  the event's i-th selected jet in the file's order); and for the process named ``wjets`` only, ``scale_var_up`` /
  ``_down`` (weight × (1 ± 0.025));
- any **other sample** (e.g. ``ttbar/scaleup``, ``ttbar/ME_var``) fills only the histogram variation of its own name,
  with the nominal selection and weight — never ``nominal`` or a systematic;
- **data** (no xsec) fills ``nominal`` only: an observation has no systematic variations (the AGC's fileset leaves
  data out, utils/file_input.py lines 49-50, so its processor never decides this; hepvine does not shift data).
A sample variation may not take a systematic's name (it would be summed into the nominal sample's systematic).
Not reproduced: ``pt_res_up`` (the reference smears each jet pt with ``np.random.normal``, utils/systematics.py
lines 5-10: not reproducible bin by bin), and the ML observables.

Checked against the AGC reference, iris-hep/analysis-grand-challenge at c37bf59,
analyses/cms-open-data-ttbar/ttbar_analysis_pipeline.py: lepton cuts lines 238-240, jet cuts line 241
(``isTightLeptonVeto``: coffea's ``jetId & 4``), B_TAG_THRESHOLD = 0.5 line 251 used as ``btagCSVV2 > 0.5`` lines
258-259 and 282 (the reference had ``>=`` until AGC PR #182, commit 15cd83c, which made it ``>``), one lepton and
four jets lines 256-257, regions lines 261-262, HT line 274, trijet lines 279-285, weight xsec × lumi / nevts_total
and 1 for data lines 189-195 (lumi 3378 /pb: hepvine's ``lumi_pb`` default), binning utils/config.py lines 11-15
(NUM_BINS 25, BIN_LOW 50, BIN_HIGH 550), the variation axis a growing StrCat line 156. Variations: pt_scale_up = 1.03
lines 211 and 234-236; systematics only for the nominal sample, line 221; btag_var_0..3 and scale_var for wjets only
lines 216-218; a weight systematic fills ``<name>_up``/``_down`` with the region's weight times the correction,
lines 324-337, and btag_var's correction uses the i-th selected jet's pt, line 329 (``region_jets.pt[:, i_jet]``);
a non-nominal sample fills the variation of its own name, lines 346-351. The corrections: make_corrections_json.py
lines 3-27 (btag_var: ``1.0 + (x*0.075 / 50)`` up, ``1.0 - (x*0.075 / 50)`` down) and 44-59 (scale_var: 1.0 ± 0.025).
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import awkward as ak
import hist
import numpy as np
from coffea import processor

from hepvine.model import eras

# The AGC's own inputs (Run 2 NanoAOD, jet ID from Jet_jetId): hepvine's generated files and the 2015 open data.
RUN2 = eras.Selection(eras.ERAS["run2"], "default", eras.JET_ID_BIT)
BRANCHES = RUN2.branches
REGIONS = ("4j1b", "4j2b")
# The selection's jet-pt variations: each runs the whole selection with every jet's pt times its scale.
VARIATIONS = {"nominal": 1.0, "pt_scale_up": 1.03}
# The weight systematics of the nominal selection: name -> (which selected jet's pt the correction takes, or None
# for a constant correction; the sign of the shift).
BTAG_JETS = 4
BTAG_VARIATIONS = {
    f"btag_var_{i}_{direction}": (i, sign)
    for i in range(BTAG_JETS)
    for direction, sign in (("up", 1.0), ("down", -1.0))
}
SCALE_VARIATIONS = {"scale_var_up": (None, 1.0), "scale_var_down": (None, -1.0)}
SCALE_VAR_PROCESSES = ("wjets",)  # the processes the AGC gives scale_var (W+jets only)
WEIGHT_SYSTEMATICS = {**BTAG_VARIATIONS, **SCALE_VARIATIONS}
SYSTEMATICS = (*VARIATIONS, *WEIGHT_SYSTEMATICS)  # the variation axis's first categories, in the AGC's order


def variations(process: str, variation: str, data: bool) -> tuple[str, ...]:
    """The histogram variations that a file of the spec sample PROCESS/VARIATION fills (DATA: it has no xsec)."""
    if variation != "nominal" and variation in SYSTEMATICS:
        raise ValueError(
            f"{process}/{variation}: a sample variation named like the systematic {variation!r} would "
            f"be summed into the nominal sample's; rename it in the spec (e.g. {variation}_sample)"
        )
    if variation != "nominal":
        return (variation,)
    if data:
        return ("nominal",)
    return (*VARIATIONS, *BTAG_VARIATIONS, *(SCALE_VARIATIONS if process in SCALE_VAR_PROCESSES else ()))


def observable_axis() -> hist.axis.Regular:
    """The observable's binning: Reg(25, 50, 550) GeV."""
    return hist.axis.Regular(25, 50, 550, name="observable", label="observable [GeV]")


def new_histogram() -> hist.Hist:
    """An empty histogram; its variation axis starts with SYSTEMATICS and grows by the spec's sample variations."""
    return hist.Hist(
        hist.axis.StrCategory(list(REGIONS), name="region"),
        hist.axis.StrCategory([], name="process", growth=True),
        hist.axis.StrCategory(list(SYSTEMATICS), name="variation", growth=True),
        observable_axis(),
        storage=hist.storage.Weight(),
    )


def _jagged(array: ak.Array) -> tuple[np.ndarray, np.ndarray]:
    """A jagged branch as numpy arrays: (flat values, offsets), event i's objects being
    values[offsets[i]:offsets[i+1]]."""
    layout = ak.to_packed(array).layout
    return np.asarray(layout.content.data), np.asarray(layout.offsets)


def _per_event(mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """How many objects of each event pass MASK (flat, boolean)."""
    passed = np.zeros(len(mask) + 1, dtype=np.int64)
    np.cumsum(mask, out=passed[1:])
    return passed[offsets[1:]] - passed[offsets[:-1]]


def _best_trijet_mass(p4: np.ndarray, btagged: np.ndarray, njets: np.ndarray) -> np.ndarray:
    """Per event, the mass of the three-jet combination with at least one b tag and the largest vector-sum pt.

    P4 holds (px, py, pz, E) of the events' jets, event after event, NJETS of them each. Events are taken in groups of
    equal jet multiplicity, so each group's combinations are one numpy gather.
    """
    masses = np.empty(len(njets))
    first = np.zeros(len(njets), dtype=np.int64)
    np.cumsum(njets[:-1], out=first[1:])
    for k in np.unique(njets):
        events = np.flatnonzero(njets == k)
        combos = np.array(list(itertools.combinations(range(k), 3)))  # (C, 3)
        a, b, c = (first[events][:, None] + combos[None, :, i] for i in range(3))  # each (events, C)
        total = p4[:, a] + p4[:, b] + p4[:, c]  # (4, events, C)
        pt = np.hypot(total[0], total[1])
        best = np.argmax(np.where(btagged[a] | btagged[b] | btagged[c], pt, -1.0), axis=1)
        px, py, pz, energy = total[:, np.arange(len(events)), best]
        masses[events] = np.sqrt(np.maximum(energy**2 - px**2 - py**2 - pz**2, 0))
    return masses


def _tight_lepton_veto(j: dict) -> np.ndarray:
    """JME's TightLeptonVeto jet ID for |eta| <= 2.6 from the jet's energy fractions and multiplicities (NanoAOD v15
    has no Jet_jetId; the criteria and their source are in hepvine.model.eras, JET_ID_FRACTIONS)."""
    charged, neutral = (j[x][0].astype(np.int64) for x in ("chMultiplicity", "neMultiplicity"))
    return (
        (np.abs(j["eta"][0]) <= 2.6)
        & (j["neHEF"][0] < 0.99)
        & (j["neEmEF"][0] < 0.9)
        & (charged + neutral > 1)
        & (j["chHEF"][0] > 0.01)
        & (charged > 0)
        & (j["muEF"][0] < 0.8)
        & (j["chEmEF"][0] < 0.8)
    )


class Region(NamedTuple):
    """The events of one region under one jet-pt variation."""

    observable: np.ndarray  # per event
    jet_pt: np.ndarray  # (events, BTAG_JETS): each event's first BTAG_JETS selected jets' pt, in the file's order


def _first_jets_pt(pt: np.ndarray, event: np.ndarray, jets: np.ndarray) -> np.ndarray:
    """The pt of the first BTAG_JETS of JETS (a mask over the flat jets, whose event numbers EVENT are sorted) of each
    event that has any (every selected event has at least four): shape (events, BTAG_JETS)."""
    events = event[jets]
    rank = np.arange(len(events)) - np.searchsorted(events, events)
    return pt[jets][rank < BTAG_JETS].reshape(-1, BTAG_JETS)


def select(
    events: dict, selection: eras.Selection = RUN2, jet_variations: tuple[str, ...] = tuple(VARIATIONS)
) -> dict[str, dict[str, Region]]:
    """Per jet-pt variation (of JET_VARIATIONS) and region, the selected events, reading the branches of SELECTION
    (its era's b tag and IDs).

    Columnar with numpy on the flat object arrays: the lepton selection and the jet cuts that no variation changes
    are evaluated once per chunk, and the three-jet combinations of region 4j2b are formed only for its events.
    """
    era = selection.era
    electron_id, electron_tight = era.electron_id
    e = {x: _jagged(events[f"Electron_{x}"]) for x in ("pt", "eta", "sip3d")}
    e_id = _jagged(events[electron_id])[0]
    m = {x: _jagged(events[f"Muon_{x}"]) for x in ("pt", "eta", "sip3d", "pfRelIso04_all")}
    m_id = _jagged(events[era.muon_id])[0]
    jet_branches = [*eras.JET_KINEMATICS, *selection.jet_id_branches]
    j = {name.removeprefix("Jet_"): _jagged(events[name]) for name in jet_branches}
    btag = _jagged(events[era.btag])[0]
    electrons = (e["pt"][0] > 30) & (np.abs(e["eta"][0]) < 2.1) & (e_id == electron_tight) & (e["sip3d"][0] < 4)
    muons = (
        (m["pt"][0] > 30)
        & (np.abs(m["eta"][0]) < 2.1)
        & m_id.astype(bool)
        & (m["sip3d"][0] < 4)
        & (m["pfRelIso04_all"][0] < 0.15)
    )
    one_lepton = (_per_event(electrons, e["pt"][1]) + _per_event(muons, m["pt"][1])) == 1

    # The jets that any variation could select: in one-lepton events, passing the cuts no variation changes.
    offsets = j["pt"][1]
    n = len(offsets) - 1
    tight = ((j["jetId"][0] & 4) != 0) if selection.jet_id == eras.JET_ID_BIT else _tight_lepton_veto(j)
    candidate = (np.abs(j["eta"][0]) < 2.4) & tight & np.repeat(one_lepton, np.diff(offsets))
    event = np.repeat(np.arange(n), np.diff(offsets))[candidate]
    raw_pt, eta, phi, mass = (j[x][0][candidate] for x in ("pt", "eta", "phi", "mass"))
    btagged = btag[candidate] > era.btag_wp

    result = {}
    for variation in jet_variations:
        pt = raw_pt * VARIATIONS[variation]
        good = pt > 30
        njets = np.bincount(event[good], minlength=n)
        nbtag = np.bincount(event[good & btagged], minlength=n)
        one_b, two_b = (njets >= 4) & (nbtag == 1), (njets >= 4) & (nbtag >= 2)

        in_one_b = good & one_b[event]
        ht = np.bincount(event[in_one_b], weights=pt[in_one_b], minlength=n)[one_b]

        jets = good & two_b[event]
        pt_j, eta_j, phi_j = pt[jets].astype(np.float64), eta[jets], phi[jets]
        px, py, pz = pt_j * np.cos(phi_j), pt_j * np.sin(phi_j), pt_j * np.sinh(eta_j)
        p4 = np.stack([px, py, pz, np.sqrt(px**2 + py**2 + pz**2 + mass[jets].astype(np.float64) ** 2)])
        result[variation] = {
            "4j1b": Region(ht, _first_jets_pt(pt, event, in_one_b)),
            "4j2b": Region(_best_trijet_mass(p4, btagged[jets], njets[two_b]), _first_jets_pt(pt, event, jets)),
        }
    return result


def observables(events: dict, selection: eras.Selection = RUN2) -> dict[str, dict[str, np.ndarray]]:
    """Per jet-pt variation and region, the observable of each selected event (a flat array)."""
    return {
        variation: {region: selected.observable for region, selected in regions.items()}
        for variation, regions in select(events, selection).items()
    }


def _weights(variation: str, selected: Region, weight: float) -> np.ndarray:
    """The weights of SELECTED's events in histogram VARIATION: WEIGHT, times a weight systematic's correction."""
    weights = np.full(len(selected.observable), weight)
    if variation not in WEIGHT_SYSTEMATICS:
        return weights
    jet, sign = WEIGHT_SYSTEMATICS[variation]
    if jet is None:  # scale_var
        return weights * (1.0 + sign * 0.025)
    return weights * (1.0 + sign * (selected.jet_pt[:, jet].astype(np.float64) * 0.075 / 50))


def fills_of(
    events: dict,
    process: str,
    weight: float,
    selection: eras.Selection = RUN2,
    variation: str = "nominal",
    data: bool = False,
) -> tuple[list[tuple[str, str, np.ndarray, np.ndarray]], dict[str, int]]:
    """What EVENTS of the spec sample PROCESS/VARIATION (read with SELECTION; DATA: it has no xsec) fill: (one
    (region, histogram variation, observables, weights) for every region and each histogram variation the sample fills
    (``variations``), the nominal selection's count per region)."""
    fills = variations(process, variation, data)
    selected = select(events, selection, tuple(v for v in VARIATIONS if v == "nominal" or v in fills))
    filled = []
    for region in REGIONS:
        for name in fills:
            chosen = selected[name if name in VARIATIONS else "nominal"][region]
            filled.append((region, name, chosen.observable, _weights(name, chosen, weight)))
    return filled, {region: len(selected["nominal"][region].observable) for region in REGIONS}


def fill(h: hist.Hist, events: dict, process: str, *args, **kwargs) -> dict[str, int]:
    """Fill H (``new_histogram``) with what ``fills_of(EVENTS, PROCESS, *ARGS, **KWARGS)`` gives (its weight, selection,
    sample variation and whether it is data); returns the nominal selection's count per region."""
    filled, counts = fills_of(events, process, *args, **kwargs)
    for region, name, observable, weights in filled:
        h.fill(region=region, process=process, variation=name, observable=observable, weight=weights)
    return counts


def region_histograms(
    filled: list[tuple[str, str, np.ndarray, np.ndarray]], process: str, into: dict[str, hist.Hist] | None = None
) -> dict[str, hist.Hist]:
    """FILLED (``fills_of``'s, of a sample of PROCESS) as histograms.root's 1-D histograms, one
    ``<region>_<process>_<variation>`` each (observable axis, weighted), empty ones too: what ``fill`` fills into
    ``new_histogram``, each region and variation a histogram of its own, filled as it is (not sliced out of one).
    Filled into INTO's histograms where it has them already (chunk after chunk of a file)."""
    out = {} if into is None else into
    for region, name, observable, weights in filled:
        key = f"{region}_{process}_{name}"
        if key not in out:
            out[key] = hist.Hist(observable_axis(), storage=hist.storage.Weight())
        out[key].fill(observable=observable, weight=weights)
    return out


def event_weight(xsec_pb: float | None, lumi_pb: float, nevts_total: int) -> float:
    """xsec × lumi / nevts_total for simulation; 1 for data (no xsec)."""
    return 1.0 if xsec_pb is None else xsec_pb * lumi_pb / nevts_total


class Branches:
    """NanoEvents seen as flat NanoAOD branches by name (``Jet_pt``): a field of the events (``BaseSchema``, or a
    flat branch such as ``run``) or a collection's field (``NanoAODSchema``: ``events.Jet.pt``)."""

    def __init__(self, events):
        self.events = events
        self.fields = set(events.fields)

    def __getitem__(self, name: str):
        if name in self.fields:
            return self.events[name]
        collection, _, field = name.partition("_")
        return self.events[collection][field]

    def names(self) -> set[str]:
        """Every branch name the events hold (a collection's fields as ``<collection>_<field>``), read off their layout
        (no array made for each of the ~70 fields of NanoAOD, nothing read); of events cut or masked (not a plain
        record array), field by field."""
        layout = self.events.layout
        if isinstance(layout, ak.contents.RecordArray):
            contents = layout.contents
        else:
            contents = [self.events[name].layout for name in layout.fields]
        found = set(layout.fields)
        for name, content in zip(layout.fields, contents):
            fields = content.fields
            if not fields and content.purelist_parameter("__record__") is not None:
                # A named record of no fields (plain, or indexed in masked events) stands for a field not made
                # (hepvine's config columns: auto or traced, for a field this processor does not read): the array's
                # .fields are the field's.
                fields = self.events[name].fields
            found.update(f"{name}_{f}" for f in fields)
        return found


def _tag(events) -> str | None:
    """The ``tag`` object (a TObjString naming its campaign) of the file EVENTS come from, if it has one: read from
    the file they are read from (their factory's ``file_handle``: a cache's, or a recompressed copy's, the same
    objects), opened again by its name (``metadata["filename"]``, the dataset's URL for it) only when the events
    have no file handle."""

    def tag_in(directory) -> str | None:
        return str(directory["tag"]) if "tag" in directory.keys(cycle=False) else None

    handle = getattr(events.attrs.get("@events_factory"), "file_handle", None)
    if handle is not None:
        return tag_in(getattr(handle, "root_directory", handle))  # a ReadOnlyFile (a tree's .file) or a directory
    import uproot

    with uproot.open(events.metadata["filename"]) as f:
        return tag_in(f)


def file_selection(events, branches: Branches, names: set[str] | None = None) -> eras.Selection:
    """The era's selection for the file of EVENTS (``hepvine.model.eras``: the metadata's era, else the file's tag, run
    or branches). NAMES: ``branches.names()``, if known."""
    filename, forced = events.metadata["filename"], events.metadata.get("era")
    names = branches.names() if names is None else names
    tag = first_run = None
    if forced is None:
        tag = _tag(events)
        if "genWeight" not in names and "run" in names and len(events):
            first_run = int(branches["run"][0])
    return eras.select(filename, names, *eras.era_of(filename, names, forced, tag, first_run))


def events_histogram(n: int) -> hist.Hist:
    """The events analysed, as a one-bin histogram (histograms.root's ``events_<process>_<variation>``)."""
    h = hist.Hist(hist.axis.Regular(1, 0.0, 1.0, name="events"), storage=hist.storage.Weight())
    h.fill(events=np.full(1, 0.5), weight=float(n))
    return h


class TtbarProcessor(processor.ProcessorABC):
    """The AGC ttbar selection (this module's docstring) as a coffea processor."""

    _names: tuple = (None, None)  # (a file's tree, the branch names its events hold): the last file's (_names_of)

    def __init__(self, lumi_pb: float = 3378.0):
        self.lumi_pb = lumi_pb

    def _names_of(self, events, branches: Branches) -> set[str]:
        """``branches.names()`` of EVENTS, made once a file's tree (its chunks hold the same fields) rather than for
        every chunk: ~2.4 ms a chunk of the NanoAOD layout (the processor bench's 500,000-event ZSTD copy: ~12 ->
        ~2.4 ms a file of ~650-700)."""
        meta = events.metadata
        tree = (meta.get("filename"), meta.get("fileuuid"), meta.get("treename"))
        if tree[0] is None:
            return branches.names()
        if self._names[0] != tree:
            self._names = (tree, branches.names())
        return self._names[1]

    def process(self, events):
        meta = events.metadata
        process, variation, xsec = meta["process"], meta["variation"], meta.get("xsec")
        branches = Branches(events)
        filled, _ = fills_of(
            branches,
            process,
            event_weight(xsec, self.lumi_pb, meta.get("nevts_total") or 1),
            file_selection(events, branches, self._names_of(events, branches)),
            variation,
            xsec is None,
        )
        out = region_histograms(filled, process)
        out[f"events_{process}_{variation}"] = events_histogram(len(events))
        return out
