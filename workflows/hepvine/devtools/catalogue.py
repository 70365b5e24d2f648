"""Registering files of the sandbox's origin in the sandbox's Rucio (sandbox/catalogue.py), as a site's data
management would: each file a DID of the scope ``cms`` named by its logical file name (``/store/...``), with its
size, adler32 and events, a replica at each storage element asked for (SANDBOX_SITE_B: copied onto the second
origin's disk first), attached to its dataset, the datasets to one container. For the demo and the tests; a real
site registers its files itself."""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path
from typing import Callable, Iterable

ORIGIN, SITE_B = "SANDBOX_ORIGIN", "SANDBOX_SITE_B"
CHUNK = 500  # files per registration call (1,000 replicas at once failed on the sandbox's SQLite)
# Rucio's XRootD protocol, readable and writable from anywhere: every reader of the sandbox is on loopback.
DOMAINS = {
    "lan": {"read": 1, "write": 1, "delete": 1},
    "wan": {"read": 1, "write": 1, "delete": 1, "third_party_copy_read": 1, "third_party_copy_write": 1},
}


def adler32(path: Path) -> str:
    """The file's Adler-32 as Rucio keeps it (8 hex digits)."""
    value = 1
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            value = zlib.adler32(chunk, value)
    return f"{value & 0xFFFFFFFF:08x}"


def set_storage(client, rse: str, port: int, site: str) -> None:
    """Storage element RSE of SITE: the XRootD server on loopback PORT, not deterministic (each replica is
    registered with its own URL, its path on that server). Added if new, else its protocol pointed at PORT (what
    was registered on it stays)."""
    if rse in {r["rse"] for r in client.list_rses()}:
        if any(p["scheme"] == "root" for p in client.get_rse(rse).get("protocols", [])):
            client.delete_protocols(rse, "root")
    else:
        client.add_rse(rse, deterministic=False)
    client.add_protocol(
        rse,
        {
            "scheme": "root",
            "hostname": "127.0.0.1",
            "port": port,
            "prefix": "/",
            "impl": "rucio.rse.protocols.xrootd.Default",
            "domains": DOMAINS,
        },
    )
    client.add_rse_attribute(rse, "site", site)


def storage(services: dict) -> dict[str, dict]:
    """The sandbox's storage elements: {RSE: {url, port, data_dir, site}} (services.json)."""
    return services["rucio"]["storage"]


def register_files(
    client,
    services: dict,
    container: str,
    datasets: dict[str, list[dict]],
    rses_of: Callable[[str], Iterable[str]],
    more_storage: dict[str, dict] | None = None,
) -> str:
    """Register DATASETS' files ({dataset name: [{name (its LFN), bytes, adler32, events}]}) in CONTAINER, each with a
    replica at every RSE that RSES_OF(lfn) names (the sandbox's, or MORE_STORAGE's: {RSE: {url, data_dir}}), in
    bulk calls of up to CHUNK files; the container's DID. Only the catalogue: the files' bytes are the caller's."""
    scope = services["rucio"]["scope"]
    where = {**storage(services), **(more_storage or {})}
    for name, files in datasets.items():
        client.add_dataset(scope, name)
        for first in range(0, len(files), CHUNK):
            chunk = files[first : first + CHUNK]
            at: dict[str, list[dict]] = {}
            for f in chunk:
                for rse in rses_of(f["name"]):
                    replica = {"scope": scope, "name": f["name"], "bytes": f["bytes"], "adler32": f["adler32"]}
                    at.setdefault(rse, []).append({**replica, "pfn": f"{where[rse]['url']}/{f['name']}"})
            for rse, replicas in at.items():
                client.add_replicas(rse, replicas)
            client.set_dids_metadata_bulk(
                [{"scope": scope, "name": f["name"], "meta": {"events": f["events"]}} for f in chunk]
            )
            client.attach_dids(scope, name, [{"scope": scope, "name": f["name"]} for f in chunk])
    client.add_container(scope, container)
    client.attach_dids(scope, container, [{"scope": scope, "name": name} for name in datasets])
    return f"{scope}:{container}"


def register(
    client,
    services: dict,
    container: str,
    datasets: dict[str, Iterable[tuple[str, int]]],
    rses_of: Callable[[str], Iterable[str]],
    more_storage: dict[str, dict] | None = None,
) -> str:
    """Register DATASETS ({dataset name: [(lfn, events)]}, each file on the sandbox origin at its LFN) in
    CONTAINER as ``register_files`` does, each file copied first onto the disk of every other storage element that
    RSES_OF(lfn) names; the container's DID."""
    where = {**storage(services), **(more_storage or {})}
    origin_data = Path(where[ORIGIN]["data_dir"])
    described = {}
    for name, files in datasets.items():
        described[name] = []
        for lfn, events in files:
            source = origin_data / lfn.lstrip("/")
            for rse in rses_of(lfn):
                at = Path(where[rse]["data_dir"]) / lfn.lstrip("/")
                if rse != ORIGIN and not at.exists():
                    at.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, at)
            size = source.stat().st_size
            described[name].append({"name": lfn, "bytes": size, "adler32": adler32(source), "events": events})
    return register_files(client, services, container, described, rses_of, more_storage)
