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


def add_storage(client, rse: str, port: int, site: str) -> None:
    """A storage element RSE of SITE: the XRootD server on loopback PORT, not deterministic (each replica is
    registered with its own URL, its path on that server)."""
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


def register(
    client,
    services: dict,
    container: str,
    datasets: dict[str, Iterable[tuple[str, int]]],
    rses_of: Callable[[str], Iterable[str]],
    more_storage: dict[str, dict] | None = None,
) -> str:
    """Register DATASETS ({dataset name: [(lfn, events)]}, each file on the sandbox origin at its LFN) in
    CONTAINER, each file with a replica at every RSE that RSES_OF(lfn) names (the sandbox's, or MORE_STORAGE's:
    {RSE: {url, data_dir}}); the container's DID."""
    scope = services["rucio"]["scope"]
    where = {**storage(services), **(more_storage or {})}
    origin_data = Path(where[ORIGIN]["data_dir"])
    for name, files in datasets.items():
        client.add_dataset(scope, name)
        dids = []
        for lfn, events in files:
            source = origin_data / lfn.lstrip("/")
            about = {"scope": scope, "name": lfn, "bytes": source.stat().st_size, "adler32": adler32(source)}
            for rse in rses_of(lfn):
                at = Path(where[rse]["data_dir"]) / lfn.lstrip("/")
                if rse != ORIGIN and not at.exists():
                    at.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, at)
                client.add_replicas(rse, [{**about, "pfn": f"{where[rse]['url']}/{lfn}"}])
            client.set_metadata(scope, lfn, "events", events)
            dids.append({"scope": scope, "name": lfn})
        client.attach_dids(scope, name, dids)
    client.add_container(scope, container)
    client.attach_dids(scope, container, [{"scope": scope, "name": name} for name in datasets])
    return f"{scope}:{container}"
