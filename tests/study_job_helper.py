"""A reconstructable ``study_job`` bound to the store at ``STUDY_TEST_STORE_URL``, for the tests
that run a study in a child process they can kill (tests/ is on that child's ``PYTHONPATH``)."""

import os

import dagster as dg

from assets.studies import study_job
from resources.store import StoreResource
from resources.studies import StudyRunnerResource


def make_study_job() -> dg.JobDefinition:
    """``study_job`` with the test's store (``dg.reconstructable`` needs a module-level function)."""
    return dg.Definitions(jobs=[study_job], resources={
        "store": StoreResource(url=os.environ["STUDY_TEST_STORE_URL"]),
        "study_runner": StudyRunnerResource(),
    }).resolve_job_def("study_job")
