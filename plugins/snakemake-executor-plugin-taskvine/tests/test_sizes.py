"""Workers sized to fit (provision.most_worker, provision.grown): local workers without groups grow, up to this
machine's size or the --taskvine-worker-max-* settings; HTCondor workers, worker groups and someone else's workers do
not. Pure logic; the real runs are in test_failures (a larger job gets its worker; one above the most fails at once)
and test_snakemake_suite (Snakemake's own workflows with the default settings)."""

from __future__ import annotations

import os
from types import SimpleNamespace

from snakemake_executor_plugin_taskvine import ExecutorSettings, provision


def spec(cores=1, memory_mb=0, disk_mb=0, function=False):
    return SimpleNamespace(cores=cores, memory_mb=memory_mb, disk_mb=disk_mb, function=function)


def test_local_workers_grow_up_to_this_machine_or_the_settings(tmp_path):
    most = provision.most_worker(ExecutorSettings(workers="local"), tmp_path)
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    assert most[0] == os.cpu_count() and most[1] == pages and most[2] > 0
    settings = ExecutorSettings(workers="local", worker_max_cores=3, worker_max_memory_mb=5000, worker_max_disk_mb=7)
    assert provision.most_worker(settings, tmp_path) == (3, 5000, 7)


def test_condor_groups_and_others_workers_do_not_grow(tmp_path):
    assert provision.most_worker(ExecutorSettings(workers="condor"), tmp_path) is None
    assert provision.most_worker(ExecutorSettings(workers="none"), tmp_path) is None
    groups = tmp_path / "groups.yaml"
    groups.write_text("worker_groups: [{name: a}]\n")
    assert provision.most_worker(ExecutorSettings(workers="local", worker_groups=groups), tmp_path) is None


def test_a_grown_worker_takes_every_job_so_far():
    assert provision.grown((1, 2048, 8192), spec(cores=2, memory_mb=1000, disk_mb=9000)) == (2, 2048, 9000)
    assert provision.grown((2, 2048, 9000), spec(cores=1, memory_mb=3000)) == (2, 3000, 9000)
    assert provision.grown((1, 0, 0), spec(cores=4, memory_mb=3000, disk_mb=10)) == (4, 0, 0)  # 0: all it has
    assert provision.grown((1, 2048, 100), spec(disk_mb=500, function=True)) == (1, 2048, 100)  # a call: no disk
