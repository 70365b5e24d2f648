"""XRootD on the sandbox: a file read with uproot through XCache rack-a lands in that cache's directory, and a
second read is served by the cache (the origin's log shows no second open of the file)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import numpy as np
import pytest
import uproot

pytestmark = pytest.mark.sandbox


def origin_opens(services, name: str) -> int:
    """How many times the origin opened /store/NAME for reading (ofs.trace open is on in its config)."""
    log = Path(services["xrootd"]["origin"]["log"]).read_text(errors="replace")
    return sum(1 for line in log.splitlines() if "ofs_open: 0-" in line and line.endswith(f"fn=/store/{name}"))


def test_read_through_rack_a_is_cached(services, tmp_path):
    name = f"smoke/{uuid.uuid4().hex}.root"
    local = tmp_path / "events.root"
    with uproot.recreate(local) as f:
        f.mktree("Events", {"x": "f8", "n": "i4"})
        f["Events"].extend({"x": np.linspace(0, 1, 200_000), "n": np.arange(200_000, dtype=np.int32)})
    origin = services["xrootd"]["origin"]["url"]
    subprocess.run(["xrdcp", "--silent", str(local), f"{origin}//store/{name}"], check=True)

    cache = services["xrootd"]["caches"]["rack-a"]
    url = f"{cache['url']}//store/{name}"
    cached = Path(cache["cache_dir"]) / "store" / name
    assert not cached.exists() and origin_opens(services, name) == 0

    with uproot.open(url) as f:
        first = f["Events"].arrays(["x", "n"], library="np")
        assert f.file.source.num_requested_bytes > 0
    assert cached.exists() and Path(f"{cached}.cinfo").exists()
    assert origin_opens(services, name) == 1

    with uproot.open(url) as f:
        second = f["Events"].arrays(["x", "n"], library="np")
    assert origin_opens(services, name) == 1, "the second read went to the origin, not the cache"
    assert np.array_equal(first["n"], second["n"]) and second["n"][-1] == 199_999
    # The other rack's cache was not involved.
    assert not (Path(services["xrootd"]["caches"]["rack-b"]["cache_dir"]) / "store" / name).exists()
