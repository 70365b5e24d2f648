"""Data-taking eras: which branches and working points the AGC ttbar selection uses in each, and which era a file is.

The selection (``hepvine.analysis``) is the same everywhere — one tight lepton, at least four tight jets, b tags
counted per region — but its inputs changed between NanoAOD versions: Run 3 NanoAOD (v12 and later) has no
``Jet_btagCSVV2``, and v15 has no ``Jet_jetId``. ``ERAS`` lists, per era, the b-tag discriminant with its published
medium working point, the jet ID and the lepton IDs. docs/eras.md explains the choices for physicists.

A file's era comes from, in this order: the spec (the process's optional ``era`` key), the file's ``tag`` object
when it names a CMS campaign (CMSSW writes ``untagged`` unless the production sets it), the run number of
collision data (``run`` of the first event; data has no ``genWeight``), and for simulation the branches (Run 3
NanoAOD stores rho as the ``Rho_*`` collection and has the Run 3 taggers; Run 2 has the flat ``fixedGridRho*``
branches and ``Jet_btagCSVV2``). Simulation of Run 3 cannot tell its year from its branches: its process needs
``era`` in the spec. ``select`` then checks that the file has every branch its era needs. Both failures are
``FileProblem``s (permanent, hepvine.model.records) whose message names the file, the era and the branch, and whose fix
says what to change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hepvine.model.records import RERUN_FIXED, FileProblem

DOC = "docs/eras.md"


@dataclass(frozen=True)
class Era:
    """The selection's inputs in one era. A jet is b tagged when its ``btag`` discriminant is > ``btag_wp``."""

    name: str
    what: str
    btag: str
    btag_wp: float
    runs: tuple[int, int]  # collision data of this era has first_run <= run <= last_run
    run3: bool  # Run 3 NanoAOD: Jet_jetId may be absent (v15), TightLeptonVeto is then computed from the jet
    electron_id: tuple[str, int] = ("Electron_cutBased", 4)  # cut-based ID, 4 = tight (Run 2 and Run 3 NanoAOD)
    muon_id: str = "Muon_tightId"  # the muon POG's tight ID flag (Run 2 and Run 3 NanoAOD)


# Run 2: the AGC's choices, unchanged (2015 CMS open data and the UL 2016–2018 NanoAOD have the same branches):
# CSVV2 > 0.5 — iris-hep/analysis-grand-challenge, analyses/cms-open-data-ttbar/ttbar_analysis_pipeline.py lines
# 251 (B_TAG_THRESHOLD = 0.5), 258-259 and 282 (``btagCSVV2 > B_TAG_THRESHOLD``; ``>=`` became ``>`` in AGC PR #182,
# commit 15cd83c, "fix: b-tagging threshold comparison"). Run ranges: 2015B (246908) to the end of 2018D (325175).
# Run 3: DeepJet (``btagDeepFlavB``, in every Run 3 NanoAOD version, v10 to v15; PNet and ParT exist only from v12)
# at BTV's medium working points, https://btv-wiki.docs.cern.ch/ScaleFactors/ Run3Summer22 (0.3086), Run3Summer22EE
# (0.3196), Run3Summer23 (0.2431), Run3Summer23BPix (0.2435). Run ranges from PdmV (twiki PdmVRun3Analysis):
# 2022 C-D up to 359021, 2022 E-G from 359022 (after the ECAL endcap water leak), 2023 B-C up to 369802, 2023 D
# from 369803 (after the BPix module failure).
ERAS = {
    era.name: era
    for era in (
        Era(
            "run2",
            "Run 2: 2015 open data (the AGC sample) and 2016-2018 UL",
            "Jet_btagCSVV2",
            0.5,
            (246908, 325175),
            run3=False,
        ),
        Era("run3-2022", "Run 3 2022 C-D (Run3Summer22)", "Jet_btagDeepFlavB", 0.3086, (355100, 359021), run3=True),
        Era("run3-2022EE", "Run 3 2022 E-G (Run3Summer22EE)", "Jet_btagDeepFlavB", 0.3196, (359022, 362760), run3=True),
        Era("run3-2023", "Run 3 2023 B-C (Run3Summer23)", "Jet_btagDeepFlavB", 0.2431, (366403, 369802), run3=True),
        Era(
            "run3-2023BPix", "Run 3 2023 D (Run3Summer23BPix)", "Jet_btagDeepFlavB", 0.2435, (369803, 370790), run3=True
        ),
    )
}

# Campaign names a production may write into the file's ``tag`` object (most specific first).
TAG_CAMPAIGNS = (
    (re.compile(r"Run3Summer22EE|Run2022[EFG]"), "run3-2022EE"),
    (re.compile(r"Run3Summer22|Run2022[CD]"), "run3-2022"),
    (re.compile(r"Run3Summer23BPix|Run2023D"), "run3-2023BPix"),
    (re.compile(r"Run3Summer23|Run2023[BC]"), "run3-2023"),
    (re.compile(r"RunII|UL1[678]|Run201[5678]"), "run2"),
)
RUN3_MARKERS = ("Rho_fixedGridRhoFastjetAll", "Jet_btagPNetB", "Jet_btagRobustParTAK4B", "Jet_btagUParTAK4B")
RUN2_MARKERS = ("fixedGridRhoFastjetAll", "Jet_btagCSVV2")

JET_KINEMATICS = ("Jet_pt", "Jet_eta", "Jet_phi", "Jet_mass")
JET_ID_BIT = "Jet_jetId"  # bit 2 (value 4): TightLeptonVeto, in Run 2 and Run 3 NanoAOD up to v14
# NanoAOD v15 dropped Jet_jetId; JME's TightLeptonVeto for AK4 PUPPI jets at |eta| <= 2.6 from these (the AGC's
# jets have |eta| < 2.4): twiki CMS/JetID13p6TeV, and jsonpog-integration POG/JME/<era>/jetid.json.gz with its
# examples/jetidExample.py (multiplicity = chMultiplicity + neMultiplicity).
JET_ID_FRACTIONS = (
    "Jet_neHEF",
    "Jet_neEmEF",
    "Jet_chHEF",
    "Jet_chEmEF",
    "Jet_muEF",
    "Jet_chMultiplicity",
    "Jet_neMultiplicity",
)
ELECTRONS = ("Electron_pt", "Electron_eta", "Electron_sip3d")
MUONS = ("Muon_pt", "Muon_eta", "Muon_sip3d", "Muon_pfRelIso04_all")


@dataclass(frozen=True)
class Selection:
    """What the analysis of one file reads: its era, how the era was decided, and the jet ID's source."""

    era: Era
    decided_by: str  # "spec", "tag '...'", "run 360393" or "branches"
    jet_id: str  # JET_ID_BIT, or "fractions" (computed TightLeptonVeto, NanoAOD v15)

    @property
    def jet_id_branches(self) -> list[str]:
        return [JET_ID_BIT] if self.jet_id == JET_ID_BIT else list(JET_ID_FRACTIONS)

    @property
    def branches(self) -> list[str]:
        return [
            *JET_KINEMATICS,
            self.era.btag,
            *self.jet_id_branches,
            *ELECTRONS,
            self.era.electron_id[0],
            *MUONS,
            self.era.muon_id,
        ]

    def describe(self) -> str:
        return f"{self.era.name} (by {self.decided_by}; jet ID from {self.jet_id})"


def _era_fix(path: str) -> str:
    return f"set `era` for the process of {path} in the spec to one of {', '.join(ERAS)} (see {DOC})"


def _fix(path: str) -> str:
    return _era_fix(path) + "; " + RERUN_FIXED


def era_of(
    path: str, names: set[str], forced: str | None = None, tag: str | None = None, first_run: int | None = None
) -> tuple[Era, str]:
    """(era, what decided it) of the file at PATH with the Events branches NAMES, its ``tag`` string and, for
    collision data, the run of its first event."""
    if forced is not None:
        if forced not in ERAS:
            raise FileProblem(
                "unknown-era", f"{path}: the spec's era {forced!r} is not one of {', '.join(ERAS)}", _fix(path)
            )
        return ERAS[forced], "spec"
    for pattern, name in TAG_CAMPAIGNS:
        if tag and pattern.search(tag):
            return ERAS[name], f"tag {tag!r}"
    if first_run is not None:
        for era in ERAS.values():
            if era.runs[0] <= first_run <= era.runs[1]:
                return era, f"run {first_run}"
        raise FileProblem(
            "unknown-era",
            f"{path}: collision data of run {first_run}, which no era of hepvine "
            f"covers ({', '.join(f'{e.name}: {e.runs[0]}-{e.runs[1]}' for e in ERAS.values())})",
            f"add the era to hepvine.model.eras, or drop the file from the spec ({DOC}); " + RERUN_FIXED,
        )
    run3 = [m for m in RUN3_MARKERS if m in names]
    if run3:
        raise FileProblem(
            "unknown-era",
            f"{path}: Run 3 simulation (it has {run3[0]}), whose year the file does "
            "not say (its tag is " + (repr(tag) if tag else "absent") + ")",
            _fix(path),
        )
    if any(m in names for m in RUN2_MARKERS):
        return ERAS["run2"], "branches"
    raise FileProblem(
        "unknown-era",
        f"{path}: neither Run 2 ({', '.join(RUN2_MARKERS)}) nor Run 3 "
        f"({', '.join(RUN3_MARKERS)}) NanoAOD branches in 'Events'",
        _fix(path),
    )


def select(path: str, names: set[str], era: Era, decided_by: str) -> Selection:
    """The selection of ERA for a file with the Events branches NAMES; a FileProblem names the first branch the era
    needs and the file lacks."""
    jet_id = JET_ID_BIT if JET_ID_BIT in names or not era.run3 else "fractions"
    selection = Selection(era, decided_by, jet_id)
    missing = [b for b in selection.branches if b not in names]
    if missing:
        also = f" (and {len(missing) - 1} more: {', '.join(missing[1:])})" if len(missing) > 1 else ""
        raise FileProblem(
            "missing-branch",
            f"{path}: era {era.name} (decided by {decided_by}) needs branch {missing[0]}, which 'Events' lacks{also}",
            "if the file is of another era, " + _era_fix(path) + "; if it is of this era, the file is "
            "incomplete: replace it or drop it from the spec; " + RERUN_FIXED,
        )
    return selection


def for_file(path: str, f, events, forced: str | None = None) -> Selection:
    """The selection for the open file F (uproot) whose ``Events`` (TTree or RNTuple) is EVENTS."""
    names = set(events.keys())
    tag = None
    if forced is None and "tag" in f.keys(cycle=False):
        tag = str(f["tag"])
    first_run = None
    if forced is None and "genWeight" not in names and "run" in names and events.num_entries:
        first_run = int(events.arrays(["run"], entry_stop=1, library="np")["run"][0])
    era, decided_by = era_of(path, names, forced, tag, first_run)
    return select(path, names, era, decided_by)
