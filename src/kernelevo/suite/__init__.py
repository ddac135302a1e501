"""Suites: many tasks judged (or searched) at once, with KernelBench's summary figures.

    from kernelevo.suite import SuitePlan, run_suite
"""

from kernelevo.suite.metrics import SuiteSummary, summarize
from kernelevo.suite.runner import SuitePlan, SuiteResult, SuiteStopped, run_suite
from kernelevo.suite.tasks import SuiteTask, expand_specs, find_solutions

__all__ = ["SuitePlan", "SuiteResult", "SuiteStopped", "SuiteSummary", "SuiteTask",
           "expand_specs", "find_solutions", "run_suite", "summarize"]
