"""The layout of a real NanoAOD file that ``hepvine generate --schema nanoaod`` follows: the data file
``nanoschema.json`` beside this module (package data; written by benchmarks/extract_nanoschema.py, never by hand),
whose ``about`` says which file it describes.

TREES: per TTree, its branches in file order as (name, numpy type, counter, summary). The counter is None for a
scalar branch, "counter" for a counter, else the name of the jagged branch's counter. The summary of the values
(flattened for a jagged branch) is ("p", fraction true) for a bool, ("v", ((value, frequency), ...)) for a few
distinct values, else ("q", quantiles at QUANTILES, float mantissa bits kept or None). TAG is the file's ``tag``
string. The CMSSW framework trees MetaData and ParameterSets (no uproot writer) are not described.
"""

from __future__ import annotations

import importlib.resources
import json

DATA = "nanoschema.json"


def _tuples(value):
    """VALUE with its JSON lists as tuples, as the generator reads them."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


_LAYOUT = json.loads(importlib.resources.files("hepvine.devtools").joinpath(DATA).read_text())
ABOUT: str = _LAYOUT["about"]
SOURCE: str = _LAYOUT["source"]
QUANTILES: tuple = _tuples(_LAYOUT["quantiles"])
TAG: str | None = _LAYOUT["tag"]
TREES: dict[str, list[tuple]] = {tree: [_tuples(b) for b in branches] for tree, branches in _LAYOUT["trees"].items()}
