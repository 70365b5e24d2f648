"""Site configs (``site-configs/<name>.yaml``, schema ``workflows/schemas/site.schema.yaml``): loading, validation,
and each file's route — its home cache (rendezvous hashing of its logical file name), that cache's rack, the URL the
task reads, and the routes to fall back to, in order, when that one cannot be reached.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import yaml

from hepvine import placement

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "site.schema.yaml"
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
ROOT_URL = re.compile(r"^(root://[^/]+)/(/.*)$")


class SiteError(ValueError):
    """A site config that cannot be used; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class Route:
    """Where one file is read from: URL (through CACHE, in RACK), then each of FALLBACKS in turn."""

    lfn: str
    url: str
    cache: str | None = None
    rack: str | None = None
    fallbacks: tuple[tuple[str | None, str], ...] = ()  # (cache or None for the origin, url)


@dataclass
class Site:
    name: str
    access: str
    origins: list[dict]
    caches: list[dict]
    racks: list[dict]
    worker_groups: list[dict] = field(default_factory=list)
    xrootd_client: dict = field(default_factory=dict)
    prefer_wait_seconds: float = 30.0
    interconnect_gbps: float | None = None
    per_core_mbps: float | None = None
    path: str = ""

    def rack_of(self, cache: str) -> str:
        return next(c["rack"] for c in self.caches if c["name"] == cache)

    def route(self, path: str) -> Route:
        """The route of the file at PATH. ``root://server//lfn`` URLs go through the file's home cache (unless
        access is ``direct``); anything else is a local file, read where it is."""
        match = ROOT_URL.match(path)
        if not match:
            return Route(lfn=path, url=path)
        origin, lfn = match.group(1), match.group(2)
        if self.access == "direct":
            return Route(lfn=lfn, url=path)
        order = placement.ranked(lfn, [(c["name"], c.get("weight", 1.0)) for c in self.caches])
        urls = {c["name"]: self._via(c["url"], origin, lfn) for c in self.caches}
        fallbacks = tuple((name, urls[name]) for name in order[1:]) + ((None, path),)
        return Route(lfn=lfn, url=urls[order[0]], cache=order[0], rack=self.rack_of(order[0]), fallbacks=fallbacks)

    def _via(self, cache_url: str, origin: str, lfn: str) -> str:
        if self.access == "forward-proxy":
            return f"{cache_url.rstrip('/')}//{origin}/{lfn}"
        return f"{cache_url.rstrip('/')}/{lfn}"


def _expand(value, where: str, source: Path):
    """VALUE with every ${NAME} replaced from the environment (recursively in lists and mappings)."""
    if isinstance(value, dict):
        return {k: _expand(v, f"{where}.{k}" if where else k, source) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, f"{where}[{i}]", source) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def variable(match):
        name = match.group(1)
        if name not in os.environ:
            raise SiteError(f"site config {source}: {where} names ${{{name}}}, which is not set in the environment; "
                            f"set it (for the sandbox: run through `make`, which exports the services' addresses)")
        return os.environ[name]

    return VARIABLE.sub(variable, value)


def load(path: str | Path) -> Site:
    """Read, expand and validate the site config at PATH; every problem is reported with its key."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise SiteError(f"site config {path}: cannot be read ({e.strerror}); pick one of site-configs/*.yaml") from e
    except yaml.YAMLError as e:
        raise SiteError(f"site config {path}: not valid YAML: {e}") from e
    raw = _expand(raw, "", path)
    schema = yaml.safe_load(SCHEMA.read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(raw), key=lambda e: list(e.absolute_path))
    problems = [f"{'.'.join(map(str, e.absolute_path)) or '(top level)'}: {e.message}" for e in errors]
    if not problems:
        problems = _consistency(raw)
    if problems:
        raise SiteError(f"site config {path}:\n  " + "\n  ".join(problems)
                        + f"\n(the keys are described in {SCHEMA.relative_to(SCHEMA.parents[2])})")
    return Site(
        name=raw["name"], access=raw["access"], origins=raw["origins"], caches=raw.get("caches", []),
        racks=raw["racks"], worker_groups=raw.get("worker_groups", []), xrootd_client=raw.get("xrootd_client", {}),
        prefer_wait_seconds=raw.get("placement", {}).get("prefer_wait_seconds", 30.0),
        interconnect_gbps=raw.get("interconnect_gbps"), per_core_mbps=raw.get("per_core_mbps"), path=str(path),
    )


def _consistency(raw: dict) -> list[str]:
    racks = {r["name"] for r in raw["racks"]}
    found = []
    for kind, items in (("caches", raw.get("caches", [])), ("worker_groups", raw.get("worker_groups", []))):
        names = [item["name"] for item in items]
        found += [f"{kind}: {name!r} appears more than once" for name in sorted({n for n in names if names.count(n) > 1})]
    for i, cache in enumerate(raw.get("caches", [])):
        if cache["rack"] not in racks:
            found.append(f"caches[{i}] ({cache['name']}): rack {cache['rack']!r} is not one of racks "
                         f"({', '.join(sorted(racks))})")
    if raw["access"] != "direct" and not raw.get("caches"):
        found.append(f"access {raw['access']!r} needs caches; list them, or use access: direct")
    return found
