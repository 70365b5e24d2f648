"""Workers sized to fit (provision.most_worker, able_groups, covers, requested, grown): local and HTCondor workers,
in worker groups or not, grow up to this machine's size or the pool's largest slot, or the --taskvine-worker-max-*
settings; someone else's workers do not. Pure logic (condor_status faked); the real runs are in test_failures (a
larger job gets its worker, local, in a group, or as an HTCondor job; one above the most, or needing features no
worker has, fails at once) and test_snakemake_suite (Snakemake's own workflows with the default settings)."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace

from snakemake_executor_plugin_taskvine import ExecutorSettings, provision


def spec(cores=1, memory_mb=0, disk_mb=0, function=False, features=()):
    return SimpleNamespace(cores=cores, memory_mb=memory_mb, disk_mb=disk_mb, function=function, features=features)


def test_local_workers_grow_up_to_this_machine_or_the_settings(tmp_path):
    most, problem = provision.most_worker(ExecutorSettings(workers="local"), tmp_path)
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    assert most[0] == os.cpu_count() and most[1] == pages and most[2] > 0 and problem == ""
    settings = ExecutorSettings(workers="local", worker_max_cores=3, worker_max_memory_mb=5000, worker_max_disk_mb=7)
    assert provision.most_worker(settings, tmp_path) == ((3, 5000, 7), "")


def test_condor_workers_grow_up_to_the_pools_largest_slot_or_the_settings(tmp_path, monkeypatch):
    """Each resource the most any slot has (a partitionable slot's whole; disk from KiB); the settings win (all three
    given: the pool is not asked); a pool that cannot be asked lets nothing grow (1 core, 1 MB: such a job is
    refused, naming the flag) and says why."""
    status = "4 7000 20971520.0\n1 1000 1048576\n8 2000 1024\nundefined undefined undefined\n"
    asked = []

    def condor_status(argv, **kwargs):
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout=status, stderr="")

    monkeypatch.setattr(provision.subprocess, "run", condor_status)
    assert provision.most_worker(ExecutorSettings(workers="condor"), tmp_path) == ((8, 7000, 20480), "")
    assert asked[0][:2] == ["condor_status", "-af"]
    settings = ExecutorSettings(workers="condor", worker_max_cores=3)
    assert provision.most_worker(settings, tmp_path) == ((3, 7000, 20480), "")
    asked.clear()
    given = ExecutorSettings(workers="condor", worker_max_cores=3, worker_max_memory_mb=4, worker_max_disk_mb=5)
    assert provision.most_worker(given, tmp_path) == ((3, 4, 5), "") and asked == []

    def no_pool(argv, **kwargs):
        raise subprocess.TimeoutExpired(argv, 20)

    monkeypatch.setattr(provision.subprocess, "run", no_pool)
    most, problem = provision.most_worker(ExecutorSettings(workers="condor"), tmp_path)
    assert most == (1, 1, 1) and "condor_status" in problem and "did not answer" in problem


def test_someone_elses_workers_are_not_sized():
    assert provision.run_groups(ExecutorSettings(workers="none")) is None


def test_the_groups_that_may_grow_have_the_features_the_job_needs(tmp_path):
    groups = tmp_path / "groups.yaml"
    groups.write_text("worker_groups: [{name: a, features: [a], cores: 4}, {name: b, features: [b], cores: 2}]\n")
    settings = ExecutorSettings(workers="local", worker_groups=groups)
    found = provision.run_groups(settings)
    assert [(g.name, g.cores, g.memory_mb, g.disk_mb) for g in found] == [("a", 4, 2048, 8192), ("b", 2, 2048, 8192)]
    assert [g.name for g in provision.able_groups(found, spec(cores=3, features=["b"]))] == ["b"]
    assert [g.name for g in provision.able_groups(found, spec(cores=3))] == ["a", "b"]
    assert provision.able_groups(found, spec(features=["c"])) == []  # refused at once, naming the features
    assert provision.covers((4, 2048, 8192), spec(cores=3)) and not provision.covers((2, 2048, 8192), spec(cores=3))
    assert provision.covers((1, 0, 0), spec(memory_mb=10**6, disk_mb=10**6))  # 0: what the machine has


def test_an_htcondor_worker_asks_for_memory_and_disk_that_taskvine_would_decide():
    assert provision.requested(ExecutorSettings(workers="condor"), (1, 0, 0)) == (1, 1024, 1024)
    assert provision.requested(ExecutorSettings(workers="condor"), (1, 3000, 0)) == (1, 3000, 1024)
    assert provision.requested(ExecutorSettings(workers="local"), (1, 0, 0)) == (1, 0, 0)


def test_a_grown_worker_takes_every_job_so_far():
    assert provision.grown((1, 2048, 8192), spec(cores=2, memory_mb=1000, disk_mb=9000)) == (2, 2048, 9000)
    assert provision.grown((2, 2048, 9000), spec(cores=1, memory_mb=3000)) == (2, 3000, 9000)
    assert provision.grown((1, 0, 0), spec(cores=4, memory_mb=3000, disk_mb=10)) == (4, 0, 0)  # 0: all it has
    assert provision.grown((1, 2048, 100), spec(disk_mb=500, function=True)) == (1, 2048, 100)  # a call: no disk
