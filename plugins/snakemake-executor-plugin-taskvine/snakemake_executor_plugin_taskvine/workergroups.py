"""Worker groups: the one parser of a ``worker_groups`` list — a groups file's (``--taskvine-worker-groups FILE``)
or any other YAML's that carries one, such as a workflow's site config — into WorkerGroups, with every problem named
by where the list came from, the group, the key and the fix.

Group names, features and HTCondor requirements end up in vine_factory's shell commands, the HTCondor submit
description and the workers' command lines: each is checked against a strict pattern (``SAFE_NAME``,
``SAFE_REQUIREMENTS``) here, before anything starts. Importing this module imports no TaskVine (it only reads the
patterns of the adapter, which imports ``ndcctools`` when a manager starts).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from .taskvine import SAFE_NAME, SAFE_REQUIREMENTS

KEY = "worker_groups"  # the key of a YAML file that holds the list


@dataclasses.dataclass(frozen=True)
class WorkerGroup:
    """Workers started by one factory; sizes not given in the list come from the defaults the parser is given (the
    plugin's settings), else from these."""

    name: str
    features: tuple[str, ...] = ()
    condor_requirements: str = ""
    min_workers: int = 1
    max_workers: int = 1
    cores: int = 1
    memory_mb: int = 0
    disk_mb: int = 0


GROUP_KEYS = {f.name for f in dataclasses.fields(WorkerGroup)}
FIELD_DEFAULTS = {f.name: f.default for f in dataclasses.fields(WorkerGroup) if f.default is not dataclasses.MISSING}
NAME_RULE = "use letters, digits and _ . - only, not starting with . or -"
REQUIREMENTS_RULE = (
    "write one line of a ClassAd expression (letters, digits, spaces, double quotes, "
    "_ . , : ( ) < > = ! & | + - * / % ?); no $, \\, ', `, ; or line breaks"
)
SIZES = {"min_workers": 0, "max_workers": 1, "cores": 1, "memory_mb": 0, "disk_mb": 0}  # each size's least value


def requirements_problems(text: str, where: str) -> list[str]:
    """What is wrong with an HTCondor requirements expression: characters outside SAFE_REQUIREMENTS, or (when
    HTCondor's Python bindings are here) not a ClassAd expression. condor_submit would refuse the latter, and the
    factory would try again forever, leaving the run without workers."""
    if not SAFE_REQUIREMENTS.match(text):
        return [f"{where} {text!r}: {REQUIREMENTS_RULE}"]
    try:
        import classad2
    except ImportError:
        return []  # condor_submit judges it
    try:
        classad2.ExprTree(text)
    except classad2.ClassAdException as e:
        return [f"{where} {text!r}: not a ClassAd expression ({e}); check its parentheses, operators and quotes"]
    return []


def parse(
    items: object, where: str, defaults: Mapping[str, object] | None = None, common_features: Sequence[str] = ()
) -> tuple[list[WorkerGroup], list[str]]:
    """(groups, problems) of ITEMS, the value of a ``worker_groups`` key (a list of mappings, each with at least a
    name; empty is fine here — the caller decides whether it needs groups). WHERE starts every problem (e.g.
    ``--taskvine-worker-groups FILE``). A group's sizes and requirements not given come from DEFAULTS (keys of
    WorkerGroup), else WorkerGroup's own; every group's workers also carry COMMON_FEATURES. Groups come back only
    when nothing is wrong."""
    defaults = {**FIELD_DEFAULTS, **(defaults or {})}
    if not isinstance(items, list):
        return [], [f"{where}: {KEY} must be a list of groups (each with at least a name), not {items!r}"]
    groups, found = [], []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            found.append(f"{where}: {KEY}[{i}] needs a name")
            continue
        unknown = sorted(set(item) - GROUP_KEYS)
        if unknown:
            found.append(
                f"{where}: group {item['name']}: unknown key(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(GROUP_KEYS))}"
            )
        for key, least in SIZES.items():
            value = item.get(key, defaults[key])
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                found.append(f"{where}: group {item['name']}: {key} {value!r} must be a whole number >= {least}")
        name = item["name"]
        if not SAFE_NAME.match(name):
            found.append(f"{where}: {KEY}[{i}] name {name!r}: " + NAME_RULE)
        features = item.get("features", [])
        if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
            found.append(f"{where}: group {name!r}: features must be a list of names")
            features = []
        found += [f"{where}: group {name!r}: feature {f!r}: " + NAME_RULE for f in features if not SAFE_NAME.match(f)]
        requirements = item.get("condor_requirements", "")
        if not isinstance(requirements, str) or not SAFE_REQUIREMENTS.match(requirements):
            found.append(f"{where}: group {name!r}: condor_requirements {requirements!r}: " + REQUIREMENTS_RULE)
        elif requirements:
            found += requirements_problems(requirements, f"{where}: group {name!r}: condor_requirements")
        if not found:
            groups.append(
                WorkerGroup(
                    **{
                        **defaults,
                        **{k: v for k, v in item.items() if k in GROUP_KEYS},
                        "features": tuple(features) + tuple(common_features),
                    }
                )
            )
    names = [item["name"] for item in items if isinstance(item, dict) and isinstance(item.get("name"), str)]
    found += [f"{where}: group {n} appears more than once" for n in sorted({n for n in names if names.count(n) > 1})]
    return (groups if not found else []), found
