"""Samples named by a Rucio DID (``{"ttbar": {"nominal": {"rucio": "cms:/TT.../NANOAODSIM"}}}``, or a fileset's
``{"/TT.../NANOAODSIM": {"rucio": "cms:/TT.../NANOAODSIM"}}``): resolved once, by the main process, into files with
their replicas, and kept in the campaign so that a rerun neither asks Rucio again nor sees other files.

``resolved`` returns the spec to plan the campaign from: the given one if it names no DID; else
``results/<campaign>/rucio/dataset.json``, written at the first run (and again when the spec or the site's replica
preferences change, or config ``rucio_refresh`` asks): each of the DID's files (Rucio expands containers and
datasets) with its size, its events, its checksum, and its replicas ordered by the site's preferences: the first
one's URL is the file's ``path`` (its identity, and what the caches are asked for), and all of them, in that order,
are its ``replicas``, where a read fails over to when one cannot be read (``hepvine.routing.site.Site.route``).
Beside it, ``resolution.json``: the DIDs, the server, when, and what they resolved to (the run's provenance records
it).

Preferences (site config ``replicas``): ``allow`` (storage elements to read from; absent: all), ``block`` (never),
``regex`` (only those whose name matches), ``prefer`` (this order first; the rest after, by name). A file with no
replica left is an error before any job, naming the file, its replicas and the preferences that ruled them out.

Rucio's own client (``rucio-clients``, hepvine's extra ``rucio``) does the talking: it reads the user's rucio.cfg
(``$RUCIO_CONFIG``) and authenticates as it says (userpass, X.509 proxy, token). With an X.509 proxy (``auth_type =
x509_proxy``) the proxy it will present is found where it looks and checked first (``client``'s VET): a missing or
expired one is an error naming the renewal before Rucio is asked, and the server's refusal of one names it. It is
imported only here and only when a spec names a DID.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Callable, Mapping

from hepvine.model import atomic
from hepvine.model import dataset as hv_dataset
from hepvine.model import fileset as hv_fileset

KEY = "rucio"  # a sample's key that names its DID
PROXY_AUTH = "x509_proxy"  # Rucio's client's auth_type for an X.509 proxy
SCHEME = "root"
FILESET_KEYS = {KEY, "metadata", "treename"}  # what a fileset's dataset that names a DID may hold


class ResolutionError(ValueError):
    """A DID that cannot be resolved into a campaign's files; the message names it and the fix."""


def _names_at_top(spec: dict) -> bool:
    """Whether SPEC names its DIDs as a fileset does (at the top: {dataset: {"rucio": DID}}), not as an AGC spec (a
    process's variations: {process: {variation: {"rucio": DID}}}). A top-level entry that names a DID beside keys a
    fileset's dataset does not have (an AGC process's xsec, its files) is refused, naming it."""
    top = [(name, v) for name, v in spec.items() if isinstance(v, dict) and KEY in v]
    for name, value in top:
        if set(value) - FILESET_KEYS:
            raise ResolutionError(
                f"{name}: names a DID ({value[KEY]}) beside {', '.join(sorted(set(value) - FILESET_KEYS))}: a "
                "fileset's dataset naming a DID holds only rucio, metadata and treename; in an AGC spec, name it "
                'in a variation ({"' + name + '": {"xsec": ..., "nominal": {"rucio": "..."}}})'
            )
    return bool(top)


def dids(spec) -> list[str]:
    """The DIDs SPEC names (a fileset's datasets or an AGC spec's samples), in spec order."""
    if not isinstance(spec, dict):
        return []
    if _names_at_top(spec):
        return [v[KEY] for v in spec.values() if isinstance(v, dict) and isinstance(v.get(KEY), str)]
    return [
        sample[KEY]
        for variations in spec.values()
        if isinstance(variations, dict)
        for sample in variations.values()
        if isinstance(sample, dict) and isinstance(sample.get(KEY), str)
    ]


def split_did(did: str) -> tuple[str, str]:
    scope, sep, name = did.partition(":")
    if not sep or not scope or not name:
        raise ResolutionError(f"{did!r} is not a Rucio DID: write <scope>:<name> (e.g. cms:/TT.../NANOAODSIM)")
    return scope, name


def ordered(rses: list[str], preferences: dict) -> list[str]:
    """RSES that PREFERENCES allow, the preferred first (in their order), then the others by name."""
    allow, block = preferences.get("allow"), set(preferences.get("block") or ())
    pattern = re.compile(preferences["regex"]) if preferences.get("regex") else None
    kept = [
        r
        for r in rses
        if (allow is None or r in allow) and r not in block and (pattern is None or pattern.fullmatch(r))
    ]
    prefer = list(preferences.get("prefer") or ())
    return sorted(kept, key=lambda r: (prefer.index(r) if r in prefer else len(prefer), r))


def files_of(client, did: str, preferences: dict) -> list[dict]:
    """DID's files (a container's or a dataset's, expanded by Rucio), each {lfn, did, bytes, adler32, events, path,
    replicas, rses}: its replicas' URLs ordered by PREFERENCES, the first also as path. Raises ResolutionError naming
    every file left with no replica."""
    scope, name = split_did(did)
    try:
        events = {(f["scope"], f["name"]): f.get("events") for f in client.list_files(scope, name)}
        # Only replicas Rucio says can be read now (not on a storage element blocked for reading, not lost).
        listed = list(
            client.list_replicas([{"scope": scope, "name": name}], schemes=[SCHEME], ignore_availability=False)
        )
    except Exception as e:  # Rucio's client raises its own types (DataIdentifierNotFound, AccessDenied, ...)
        raise ResolutionError(f"{did}: Rucio says {type(e).__name__}: {e}") from e
    out, unreadable = [], []
    for replica in listed:
        available = {rse for rse, state in (replica.get("states") or {}).items() if state == "AVAILABLE"}
        rses = ordered(sorted(r for r in replica["rses"] if r in available and replica["rses"][r]), preferences)
        if not rses:
            listed_at = ", ".join(sorted(replica["rses"])) or "none available"
            unreadable.append(f"{replica['scope']}:{replica['name']} (replicas: {listed_at})")
            continue
        urls = [replica["rses"][rse][0] for rse in rses]
        out.append(
            {
                "lfn": replica["name"],
                "did": f"{replica['scope']}:{replica['name']}",
                "bytes": replica["bytes"],
                "adler32": replica.get("adler32"),
                "events": events.get((replica["scope"], replica["name"])),
                "path": urls[0],
                "replicas": urls,
                "rses": rses,
            }
        )
    if unreadable:
        raise ResolutionError(
            f"{did}: {len(unreadable)} file(s) have no available replica that the site's preferences allow "
            f"({json.dumps(preferences, sort_keys=True)}): " + "; ".join(unreadable[:10])
        )
    if not out:
        raise ResolutionError(f"{did}: Rucio lists no file in it; check the name (`rucio did list {scope}:*`)")
    return sorted(out, key=lambda f: f["lfn"])


def _entry(f: dict) -> dict:
    """A resolved file as a spec's file entry keeps it."""
    entry = {"path": f["path"], "bytes": f["bytes"], "replicas": f["replicas"], "lfn": f["lfn"]}
    if f["adler32"]:
        entry["adler32"] = f["adler32"]
    return entry


def resolve(spec: dict, files: Callable[[str], list[dict]]) -> dict:
    """SPEC with each sample that names a DID replaced by its files (FILES(did), as ``files_of`` gives them): an AGC
    sample's {nevts_total, files}, a fileset dataset's {files: {path: {object_path, num_entries, ...}}}. A file that
    two DIDs both hold is refused, naming both (it would be counted twice)."""
    out = json.loads(json.dumps(spec))
    holder: dict[str, str] = {}  # a file's DID → the DID the spec named that holds it

    def resolved(did: str) -> list[dict]:
        found = files(did)
        for f in found:
            if holder.setdefault(f["did"], did) != did:
                raise ResolutionError(
                    f"{f['did']} is in both {holder[f['did']]} and {did}, which the spec names: it would be counted "
                    "twice; name only one of them"
                )
        return found

    if _names_at_top(spec):
        for value in out.values():
            if isinstance(value, dict) and KEY in value:
                did = value.pop(KEY)
                tree = value.pop("treename", hv_fileset.DEFAULT_TREE)
                value["files"] = {
                    f["path"]: {
                        "object_path": tree,
                        **({"num_entries": f["events"]} if f["events"] is not None else {}),
                        **{k: v for k, v in _entry(f).items() if k != "path"},
                    }
                    for f in resolved(did)
                }
        return out
    for process, variations in out.items():
        for variation, sample in variations.items() if isinstance(variations, dict) else ():
            if isinstance(sample, dict) and KEY in sample:
                if "files" in sample:
                    raise ResolutionError(
                        f"{process}/{variation}: names a DID ({sample[KEY]}) and lists files: keep one of them"
                    )
                did = sample.pop(KEY)
                found = resolved(did)
                missing = [f["did"] for f in found if f["events"] is None]
                if missing:
                    raise ResolutionError(
                        f"{process}/{variation}: {did}: Rucio does not know the events of {len(missing)} file(s) "
                        f"(e.g. {missing[0]}), which an AGC spec needs; name the DID in a coffea fileset instead "
                        '({"<dataset>": {"rucio": "' + did + '"}}), or register their events'
                    )
                sample["files"] = [{**_entry(f), "nevts": f["events"]} for f in found]
                sample.setdefault("nevts_total", sum(f["events"] for f in found))
    return out


def presented_proxy(environ: Mapping[str, str] | None = None, euid: int | None = None) -> tuple[Path, str] | None:
    """(the X.509 proxy Rucio's client presents to its server, how it was found) when it authenticates with one
    (``auth_type`` x509_proxy: ``$RUCIO_AUTH_TYPE`` if set, else rucio.cfg's), looked for as that client looks
    (``rucio.client.baseclient``): ``$RUCIO_CLIENT_PROXY`` if set, rucio.cfg's ``client_x509_proxy``,
    ``$X509_USER_PROXY`` if set, the default ``/tmp/x509up_u<euid>``; expanded as it expands them. None when it
    authenticates otherwise; ResolutionError for a variable set to nothing (the client finds no proxy there)."""
    from rucio.common.config import config_get, config_has_section

    environ = os.environ if environ is None else environ
    configured = config_has_section("client")

    def setting(key: str) -> str:
        return (config_get("client", key, raise_exception=False, default="") or "") if configured else ""

    auth_type = environ["RUCIO_AUTH_TYPE"] if "RUCIO_AUTH_TYPE" in environ else setting("auth_type")
    if auth_type != PROXY_AUTH:
        return None
    if "RUCIO_CLIENT_PROXY" in environ:
        value, source = environ["RUCIO_CLIENT_PROXY"], "$RUCIO_CLIENT_PROXY"
    elif setting("client_x509_proxy"):
        value, source = setting("client_x509_proxy"), "rucio.cfg's client_x509_proxy"
    elif "X509_USER_PROXY" in environ:
        value, source = environ["X509_USER_PROXY"], "$X509_USER_PROXY"
    else:
        value, source = f"/tmp/x509up_u{os.geteuid() if euid is None else euid}", "the default place"
    if not value.strip():
        raise ResolutionError(
            f"{source} is set to nothing, so Rucio's client (auth_type = {PROXY_AUTH}) finds no proxy: set it to "
            "your proxy's path, or unset it"
        )
    return Path(os.path.abspath(os.path.expanduser(os.path.expandvars(value.strip())))), source


def client(vet: Callable[[Path, str], str] | None = None):
    """Rucio's client, as the user's rucio.cfg configures it. When it authenticates with an X.509 proxy, VET(path,
    how it was found) first describes that proxy, raising ValueError (naming the renewal) for one that is missing or
    expired: every ValueError of VET is reported as the proxy's. The description is in the error if the server
    refuses the proxy."""
    try:
        from rucio.client import Client
        from rucio.common.config import config_get
    except ImportError as e:
        raise ResolutionError(
            "the spec names Rucio DIDs, but Rucio's client is not installed: pip install 'hepvine[rucio]' "
            "(rucio-clients)"
        ) from e
    try:
        host = config_get("client", "rucio_host")
    except Exception as e:  # Rucio's own types (ConfigNotFound, NoSectionError, NoOptionError)
        where = os.environ.get("RUCIO_CONFIG") or "none: $RUCIO_CONFIG is not set"
        raise ResolutionError(
            f"Rucio's client has no server to ask ({type(e).__name__}: {e}); its configuration: {where}. Point "
            "$RUCIO_CONFIG at your rucio.cfg (its [client] section names rucio_host, auth_type and account)"
        ) from e
    proxy = presented_proxy()
    described = ""
    if proxy is not None and vet is not None:
        try:
            described = vet(*proxy)
        except ValueError as e:
            raise ResolutionError(
                f"Rucio's client ({host}) authenticates with an X.509 proxy (auth_type = {PROXY_AUTH}): {e}"
            ) from e
    try:
        return Client()
    except Exception as e:  # the client raises its own exception types for config and authentication
        with_what = f" with the {described}" if described else ""
        raise ResolutionError(
            f"Rucio at {host} could not be reached or did not let you in{with_what} ({type(e).__name__}: {e}); "
            "check the rucio.cfg that $RUCIO_CONFIG names (rucio_host, account, auth_type; ca_cert, or "
            "$X509_CERT_DIR, which Rucio's client prefers, for the server's CA) and that Rucio knows your identity "
            "(`rucio whoami` says who you are)"
        ) from e


def resolved(
    spec_path: str,
    raw,
    directory: str | Path,
    preferences: dict | None,
    refresh: bool,
    may_ask: bool,
    vet: Callable[[Path, str], str] | None = None,
) -> tuple[str, dict]:
    """(where the spec to plan from is, that spec; see the module's text): SPEC_PATH and RAW (the document read from
    it, not validated) if it names no DID, else DIRECTORY/dataset.json, resolved now if it is missing, was resolved
    from another spec or other PREFERENCES, or REFRESH asks (only when MAY_ASK: the main process; others read what it
    wrote), by a ``client(VET)``. Each document is read once."""
    if not dids(raw):
        return spec_path, raw
    directory = Path(directory)
    preferences = preferences or {}
    # What decides the resolution: the spec, the preferences, and which Rucio (and as whom) the user's setup names.
    asked = {name: os.environ.get(name, "") for name in ("RUCIO_CONFIG", "RUCIO_HOME", "RUCIO_ACCOUNT")}
    key = hashlib.sha256(
        json.dumps({"spec": raw, "preferences": preferences, "rucio": asked}, sort_keys=True).encode()
    ).hexdigest()
    out, record = directory / "dataset.json", directory / "resolution.json"
    if out.exists() and record.exists():
        # Snakemake's local jobs (run: rules, in subprocesses) plan from what the main process resolved, whatever
        # the config says (rucio_refresh among it).
        if not may_ask or (not refresh and json.loads(record.read_text()).get("key") == key):
            return str(out), hv_dataset.read(out)
    if not may_ask:
        raise ResolutionError(f"{spec_path} names Rucio DIDs, and {out} is not written yet: run the campaign again")
    rucio = client(vet)
    began = time.time()
    counts: dict[str, dict] = {}

    def files(did: str) -> list[dict]:
        found = files_of(rucio, did, preferences)
        counts[did] = summary(found)
        return found

    spec = resolve(raw, files)
    # Unchanged if Rucio lists the same (a refresh that finds nothing new reruns nothing downstream).
    atomic.write_if_changed(out, json.dumps(spec) + "\n")
    atomic.write_json(
        record,
        {
            "key": key,
            "spec": str(spec_path),
            "server": getattr(rucio, "host", None),
            "account": getattr(rucio, "account", None),
            "auth_type": getattr(rucio, "auth_type", None),
            "resolved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began)),
            "seconds": round(time.time() - began, 3),
            "preferences": preferences,
            "dids": counts,
        },
    )
    return str(out), spec


def summary(files: list[dict]) -> dict:
    """What a DID's FILES (``files_of``) amount to: how many, bytes, events (None if Rucio does not know them all),
    and how many of them each storage element holds."""
    holding: dict[str, int] = {}
    for f in files:
        for rse in f["rses"]:
            holding[rse] = holding.get(rse, 0) + 1
    return {
        "files": len(files),
        "bytes": sum(f["bytes"] for f in files),
        "events": sum(f["events"] for f in files) if all(f["events"] is not None for f in files) else None,
        "rses": dict(sorted(holding.items())),
    }


def record(directory: str | Path) -> dict | None:
    """What resolution.json in DIRECTORY says (for the run's provenance), or None."""
    path = Path(directory) / "resolution.json"
    return json.loads(path.read_text()) if path.exists() else None
