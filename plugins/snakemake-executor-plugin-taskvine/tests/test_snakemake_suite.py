"""Snakemake's own executor test suite (the simple and the group workflow) on real TaskVine workers with the default
settings (they grow to fit the suite's larger jobs): local workers, with and without a shared filesystem, and
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
        # The default settings: those of the suite's jobs that need more than a default worker (threads: 2) get a
        # worker of their size (a local one, or an HTCondor job of its own).
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
        # Default sizes; at most 2 workers of 1 core, so that the sandbox's pool (two partitionable slots of 2 cores)
        # keeps a slot free for the HTCondor job of a worker of 2 cores that the suite's threads: 2 jobs get. (The
        # run's idle workers hold their slots until it ends: taskvine.IDLE_LEAVE_FIXED_IN.)
        return ExecutorSettings(workers=self.workers, max_workers=2)

    def get_assume_shared_fs(self) -> bool:
        return False
