"""Site configs (``site-configs/<name>.yaml``, schema ``workflows/hepvine/model/schemas/site.schema.yaml``): loading,
validation, and each file's route — its home cache (rendezvous hashing of its logical file name), that cache's rack, the
URL the task reads, and the routes to fall back to, in order, when that one cannot be reached.

The site's ``worker_groups`` are what the TaskVine executor plugin reads from the same file
(``--taskvine-worker-groups``): they are parsed and checked by the plugin's own parser
(``snakemake_executor_plugin_taskvine.workergroups``), never here, so that the two cannot disagree.
"""

from __future__ import annotations

import importlib.resources
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import yaml

from hepvine.routing import placement
from snakemake_executor_plugin_taskvine import workergroups

# Package data (importlib.resources: read where the package is installed, a wheel too).
SCHEMA = importlib.resources.files("hepvine.model") / "schemas" / "site.schema.yaml"
SCHEMA_NAME = "hepvine/model/schemas/site.schema.yaml"
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
ROOT_URL = re.compile(r"^(root://[^/]+)/(/.*)$")
XROOTD_PORT = 1094


def lfn(path: str) -> str:
    """The logical file name of PATH: the path part of a ``root://server//lfn`` URL (what placement hashes, the same
    on every server), else PATH itself."""
    url = ROOT_URL.match(path)
    return url.group(2) if url else path


class SiteError(ValueError):
    """A site config that cannot be used; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class Source:
    """One place a file can be read from: a cache (in a rack), or the origin (cache and rack None)."""

    url: str
    cache: str | None = None
    rack: str | None = None


@dataclass(frozen=True)
class Route:
    """Where one file is read from: its SOURCES in order, the home cache's first, then the fail-overs."""

    lfn: str
    sources: tuple[Source, ...]

    @property
    def home(self) -> Source:
        return self.sources[0]

    def as_dict(self) -> dict:
        """The route as the resolved dataset spec records it, and as the per-file tasks take it."""
        home = self.home
        return {
            "lfn": self.lfn,
            "cache": home.cache,
            "rack": home.rack,
            "url": home.url,
            "sources": [{"url": s.url, "cache": s.cache, "rack": s.rack} for s in self.sources],
        }


@dataclass
class Site:
    name: str
    access: str
    origins: list[dict]
    caches: list[dict]
    racks: list[dict]
    worker_groups: list[workergroups.WorkerGroup] = field(default_factory=list)
    xrootd_client: dict = field(default_factory=dict)
    interconnect_gbps: float | None = None
    per_core_mbps: float | None = None
    credentials: str = "none"
    replicas: dict = field(default_factory=dict)  # preferences among a Rucio file's replicas (routing.replicas)
    path: str = ""

    def rack_cores(self) -> dict[str, int]:
        """Cores of the worker pools per rack (a worker group is named after its rack)."""
        racks = {r["name"] for r in self.racks}
        cores: dict[str, int] = {}
        for group in self.worker_groups:
            if group.name in racks:
                cores[group.name] = cores.get(group.name, 0) + group.cores * group.max_workers
        return cores

    def route(self, path: str, replicas: tuple[str, ...] = ()) -> Route:
        """The route of the file at PATH. ``root://server//lfn`` URLs go through the file's home cache and fail over
        to the other caches by rendezvous rank, then the origin (with access ``direct``: the origin only); anything
        else is a local file, read where it is. A file named through Rucio has REPLICAS (every URL of it that Rucio
        lists, PATH first: see ``hepvine.routing.replicas``): it goes through the caches only if PATH is on one of
        the site's origins (the caches front those, not other sites), and its other replicas come last, in order."""
        others = tuple(Source(url=url) for url in replicas if url != path)
        match = ROOT_URL.match(path)
        if not match:
            return Route(lfn=path, sources=(Source(url=path), *others))
        origin, lfn = match.group(1), match.group(2)
        fronted = not replicas or server(origin) in {server(o["url"]) for o in self.origins}
        if self.access == "direct" or not fronted:
            return Route(lfn=lfn, sources=(Source(url=path), *others))
        by_name = {c["name"]: c for c in self.caches}
        order = placement.ranked(lfn, [(c["name"], c.get("weight", 1.0)) for c in self.caches])
        caches = tuple(
            Source(url=self._via(by_name[n]["url"], origin, lfn), cache=n, rack=by_name[n]["rack"]) for n in order
        )
        return Route(lfn=lfn, sources=caches + (Source(url=path),) + others)

    def _via(self, cache_url: str, origin: str, lfn: str) -> str:
        if self.access == "forward-proxy":
            return f"{cache_url.rstrip('/')}//{origin}/{lfn}"
        return f"{cache_url.rstrip('/')}/{lfn}"


def server(url: str) -> str:
    """The ``host:port`` of a root:// URL, with XRootD's default port (1094) when it names none."""
    host = url.removeprefix("root://").split("/", 1)[0]
    return host if ":" in host.rsplit("]", 1)[-1] else f"{host}:{XROOTD_PORT}"


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
            raise SiteError(
                f"site config {source}: {where} names ${{{name}}}, which is not set in the environment; "
                f"set it (for the sandbox: run through `make`, which exports the services' addresses)"
            )
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
    items = raw.get(workergroups.KEY, []) if isinstance(raw, dict) else []
    groups, group_problems = workergroups.parse(items, workergroups.KEY) if isinstance(items, list) else ([], [])
    problems += group_problems  # (not a list: the schema says so)
    if not problems:
        problems = _consistency(raw)
    if problems:
        raise SiteError(
            f"site config {path}:\n  " + "\n  ".join(problems) + f"\n(the keys are described in {SCHEMA_NAME})"
        )
    return Site(
        name=raw["name"],
        access=raw["access"],
        origins=raw["origins"],
        caches=raw.get("caches", []),
        racks=raw["racks"],
        worker_groups=groups,
        xrootd_client=raw.get("xrootd_client", {}),
        interconnect_gbps=raw.get("interconnect_gbps"),
        per_core_mbps=raw.get("per_core_mbps"),
        credentials=raw.get("credentials", "none"),
        replicas=raw.get("replicas", {}),
        path=str(path),
    )


def _consistency(raw: dict) -> list[str]:
    racks = {r["name"] for r in raw["racks"]}
    found = []
    names = [cache["name"] for cache in raw.get("caches", [])]
    found += [f"caches: {name!r} appears more than once" for name in sorted({n for n in names if names.count(n) > 1})]
    for i, cache in enumerate(raw.get("caches", [])):
        if cache["rack"] not in racks:
            found.append(
                f"caches[{i}] ({cache['name']}): rack {cache['rack']!r} is not one of racks "
                f"({', '.join(sorted(racks))})"
            )
    if raw["access"] != "direct" and not raw.get("caches"):
        found.append(f"access {raw['access']!r} needs caches; list them, or use access: direct")
    return found
