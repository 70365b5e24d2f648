"""A worker's disk filling up while a file is recompressed: a real full filesystem (a 1 MB tmpfs, filled), real
ROOT and uproot. The file is a transient `disk-full` failure (retried by running the same command again), its
batch-mate's record is kept, and no staged source or temporary copy is left. Mounting takes a mount namespace,
which only root can make in the sandbox: `make test` runs this in its root pass."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from kept import generated_file

pytestmark = pytest.mark.root

# Runs inside the namespace: one batch of two files whose copies go to the full tmpfs; prints the records and what
# is left in the copies directory.
RUN = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from hepvine.jobs import driver
    from hepvine.reading import fetch
    from hepvine.work import processor
    from hepvine.model.limits import Limits
    good, copies = sys.argv[1], Path(sys.argv[2])
    metadata = {"process": "ttbar", "variation": "nominal", "xsec": 1.0, "nevts_total": 2000, "era": None}
    shard = {"batch": "ttbar/nominal/direct/000/000", "rack": None, "xrootd_client": {},
             "files": [{"fid": f"ttbar/nominal/{i}", "path": good, "process": "ttbar", "variation": "nominal",
                        "index": i, "nevts": 1000, "nevts_total": 2000, "xsec": 1.0, "era": None, "bytes": None,
                        "dataset": "ttbar__nominal", "treename": "Events", "metadata": metadata, "uuid": None,
                        "steps": None, "route": fetch.local_route(good)} for i in range(1)]}
    analysis = processor.load("hepvine.examples.agc:TtbarProcessor")
    result = driver.run_batch(shard, analysis, "zstd:5", copies / "batch", fetch.Retry(1, 0),
                              Limits(rate_floor_mb_s=1, file_time_base_s=120, bytes_per_event=1))
    print(json.dumps({"records": result["records"],
                      "left": sorted(p.name for p in (copies / "batch").iterdir())}))
""")


def test_a_full_disk_is_a_transient_failure_that_leaves_nothing(tmp_path):
    good = str(generated_file(tmp_path / "good.root", "ttbar", 1000, index=0, seed=3)["path"])
    copies = tmp_path / "full"
    copies.mkdir()
    # A 1 MB tmpfs with a few kB left: the staged source (as large as the file) cannot be written.
    script = (
        'mount -t tmpfs -o size=1m tmpfs "$1" || exit 97; (dd if=/dev/zero of="$1/filler" bs=4k count=250 '
        '2>/dev/null; true); mkdir "$1/batch" && "$2" -c "$3" "$4" "$1"; status=$?; umount "$1"; exit $status'
    )
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "unchanged",
            "--",
            "/bin/sh",
            "-c",
            script,
            "_",
            str(copies),
            sys.executable,
            RUN,
            good,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    (record,) = out["records"]
    assert record["failure"]["kind"] == "disk-full", record["failure"]
    assert record["failure"]["failure_class"] == "transient"
    assert out["left"] == ["manifest.json"] or out["left"] == [], out["left"]  # no staged source, no temporary copy
