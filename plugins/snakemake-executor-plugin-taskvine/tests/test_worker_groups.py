"""Worker groups and soft placement, on real local TaskVine workers in two groups (rack-a, rack-b): a job that
prefers a group runs there while the wait lasts; one that prefers a group without workers still runs, elsewhere,
once it has waited; a bad groups file stops the run before any job, naming the group and the key."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.sandbox

GROUPS = """
worker_groups:
  - {name: rack-a, features: [rack-a], cores: 1, min_workers: 1, max_workers: 1}
  - {name: rack-b, features: [rack-b], cores: 1, min_workers: 1, max_workers: 1}
"""

# Six jobs that prefer rack-a, three that must run in rack-b; each says where it ran.
SNAKEFILE = """
rule all:
    input: expand("prefer/{i}.txt", i=range(6)), expand("must/{i}.txt", i=range(3))

rule prefer:
    output: "prefer/{i}.txt"
    resources: taskvine_prefer="rack-a"
    shell: "sleep 1; echo $SNAKEMAKE_TASKVINE_WORKER_GROUP > {output}"

rule must:
    output: "must/{i}.txt"
    resources: taskvine_features="rack-b"
    shell: "echo $SNAKEMAKE_TASKVINE_WORKER_GROUP > {output}"
"""


@pytest.mark.parametrize(
    "text, expected",
    [
        ("worker_groups: []", "needs a non-empty list under the key worker_groups"),
        ("worker_groups:\n  - {name: a, cores: 0}", "group a: cores 0 must be a whole number >= 1"),
        ("worker_groups:\n  - {name: a, rack: x}", "group a: unknown key(s) rack"),
    ],
)
def test_bad_groups_file_fails_at_start(workflow, text, expected):
    wf = workflow(SNAKEFILE)
    (wf.root / "groups.yaml").write_text(text)
    done = wf.run("--taskvine-worker-groups", "groups.yaml", timeout=120)
    assert done.returncode != 0 and expected in done.stderr, done.stderr[-2000:]
    assert not (wf.root / "must").exists()


def _ran_in(wf, pattern):
    return [p.read_text().strip() for p in sorted(wf.root.glob(pattern))]


def _run_with_groups(wf, prefer_wait_s):
    (wf.root / "groups.yaml").write_text(GROUPS)
    return wf.run(
        "--taskvine-workers",
        "local",
        "--taskvine-worker-groups",
        "groups.yaml",
        "--taskvine-prefer-wait-s",
        str(prefer_wait_s),
        timeout=240,
        check=True,
    )


def test_preferred_group_is_kept_while_the_wait_lasts(workflow):
    wf = workflow(SNAKEFILE)
    _run_with_groups(wf, prefer_wait_s=120)
    # rack-b sits idle once the three rack-b jobs are done, but the wait (120 s) never runs out: all stay in rack-a.
    assert _ran_in(wf, "prefer/*.txt") == ["rack-a"] * 6
    assert _ran_in(wf, "must/*.txt") == ["rack-b"] * 3


def test_job_preferring_a_group_without_workers_runs_elsewhere_after_the_wait(workflow):
    wf = workflow(SNAKEFILE.replace('taskvine_prefer="rack-a"', 'taskvine_prefer="rack-nowhere"'))
    _run_with_groups(wf, prefer_wait_s=2)
    ran = _ran_in(wf, "prefer/*.txt")
    assert len(ran) == 6 and set(ran) <= {"rack-a", "rack-b"}
    assert _ran_in(wf, "must/*.txt") == ["rack-b"] * 3


def test_preferring_jobs_spill_to_an_idle_group_after_the_wait(workflow):
    wf = workflow(SNAKEFILE)
    _run_with_groups(wf, prefer_wait_s=1)
    # Six 1-second jobs for one rack-a core: the last ones wait 3 s or more while rack-b is idle (its three jobs
    # are instant), so some move.
    ran = _ran_in(wf, "prefer/*.txt")
    assert len(ran) == 6 and "rack-a" in ran and "rack-b" in ran
