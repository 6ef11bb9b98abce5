"""Resources of the studies area (key ``study_runner``).

:class:`StudyRunnerResource` builds the backend a study's stored configuration describes (the
backtest engine on a workflow setup, or the synthetic workflow) and sets how many model calls a
window run keeps in flight. The domain store is the shared ``store`` resource. Nothing is read
at import; the same class serves production and tests (tests give studies a synthetic backend).
"""

from typing import Any

import dagster as dg
from sqlalchemy import Engine

from typestrict_pipeline.store import session_scope
from typestrict_pipeline.study import repository as repo
from typestrict_pipeline.study.backends import backend_from_config
from typestrict_pipeline.study.runner import StudyBackend


class StudyRunnerResource(dg.ConfigurableResource["StudyRunnerResource"]):
    """Builds a study's backend from its stored configuration.

    Attributes:
        max_in_flight: default steps (and model calls) in flight per window run when the study's
            configuration does not say.
    """

    max_in_flight: int = 8

    def backend(self, engine: Engine, study_id: int) -> StudyBackend:
        """The backend of ``study_id`` (rebuilt identically in every process)."""
        with session_scope(engine) as s:
            cfg = dict(repo.get_study(s, study_id).config_json.get("backend", {}))
        cfg.setdefault("max_in_flight", self.max_in_flight)
        if cfg.get("backend", "synthetic") == "synthetic":
            cfg.pop("max_in_flight")
        return backend_from_config(cfg)


def default_resources() -> dict[str, Any]:
    return {"study_runner": StudyRunnerResource()}
