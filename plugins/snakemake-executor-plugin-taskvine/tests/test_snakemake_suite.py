"""Snakemake's own executor test suite (the simple and the group workflow) on real TaskVine workers: local workers
with the default settings (they grow to fit the suite's larger jobs), with and without a shared filesystem, and
HTCondor-provisioned workers without one."""

from __future__ import annotations

from typing import Optional

import pytest
import snakemake.common.tests
from snakemake_interface_executor_plugins.settings import ExecutorSettingsBase

from snakemake_executor_plugin_taskvine import ExecutorSettings

pytestmark = pytest.mark.sandbox


class TaskVineSuite(snakemake.common.tests.TestWorkflowsLocalStorageBase):
    __test__ = False
    workers = "local"

    def get_executor(self) -> str:
        return "taskvine"

    def get_executor_settings(self) -> Optional[ExecutorSettingsBase]:
        # Local workers with the default settings: those of the suite's jobs that need more than a default worker
        # (threads: 2) get a local worker of their size.
        return ExecutorSettings(workers=self.workers)


class TestLocalWorkersSharedFS(TaskVineSuite):
    __test__ = True


class TestLocalWorkersNoSharedFS(TaskVineSuite):
    __test__ = True

    def get_assume_shared_fs(self) -> bool:
        return False


@pytest.mark.pool
class TestCondorWorkersNoSharedFS(TaskVineSuite):
    __test__ = True
    workers = "condor"

    def get_executor_settings(self) -> Optional[ExecutorSettingsBase]:
        # HTCondor workers are the size their settings say (they do not grow): 2 cores for the suite's threads: 2.
        return ExecutorSettings(
            workers=self.workers,
            min_workers=1,
            max_workers=2,
            worker_cores=2,
            worker_memory_mb=1500,
            worker_disk_mb=2000,
        )

    def get_assume_shared_fs(self) -> bool:
        return False
