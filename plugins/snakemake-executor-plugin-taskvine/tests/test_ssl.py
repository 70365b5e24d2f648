"""--taskvine-ssl: the manager and the workers the plugin starts talk TLS (the manager's own log says each worker
completed an SSL connection), and without it they do not."""

from __future__ import annotations

import pytest
from snakemake_runs import slow_snakefile

pytestmark = pytest.mark.sandbox

QUICK = slow_snakefile("echo {wildcards.i} > {output}", n=3)


def _ssl_connections(wf) -> int:
    logs = list((wf.root / ".snakemake" / "taskvine").glob("*/manager/*/vine-logs/debug"))
    assert logs, "the manager wrote no debug log"
    return sum(log.read_text(errors="replace").count("completed ssl connection") for log in logs)


@pytest.mark.parametrize("ssl", [True, False])
def test_ssl_setting_reaches_manager_and_workers(workflow, ssl):
    wf = workflow(QUICK)
    wf.run(*(["--taskvine-ssl"] if ssl else []), timeout=180, check=True)
    assert sorted(p.read_text() for p in (wf.root / "out").glob("*.txt")) == ["0\n", "1\n", "2\n"]
    assert (_ssl_connections(wf) > 0) is ssl
