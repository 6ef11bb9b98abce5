"""The Dagster instance's configuration (``$DAGSTER_HOME/dagster.yaml``), as plain data.

No Dagster import: these helpers only pick and write the YAML. Two shapes, both shipped in
``deploy/``:

- **SQLite** (the embedded default, ``deploy/dagster.yaml``): run, event-log and schedule storage
  in files under ``$DAGSTER_HOME`` (Dagster's SQLite storage, every database waiting 30 s for a
  busy file, a run's end read by the daemon's retries only once the run's row says it ended:
  ``resources/sqlite_storage.py``). One machine, a few concurrent runs.
- **PostgreSQL** (production, ``deploy/dagster.postgres.yaml``): the same storages in one
  PostgreSQL database (Dagster's PostgreSQL storage, a run's end likewise read by the retries
  only once the run's row says so: ``resources/postgres_storage.py``), read from ``DAGSTER_PG_URL`` or ``DAGSTER_PG_HOST`` / ``_PORT`` /
  ``_USERNAME`` / ``_PASSWORD`` / ``_DB``. The driver must be psycopg2
  (``postgresql+psycopg2``): SQLAlchemy 2.1 maps a bare ``postgresql://`` to psycopg 3, which is
  not installed.

The configuration refers to environment variables by name (``{env: NAME}``); Dagster reads them
when the instance is loaded, so no secret is ever written to disk.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from typestrict_pipeline.errors import InputError
from typestrict_pipeline.files import write_atomic

DEPLOY_DIR = Path(__file__).resolve().parent.parent / "deploy"
PG_PARTS = ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB")
PG_SCHEME = "postgresql+psycopg2"

TRAINING_TAG = "typestrict/training"
"""The tag every verdict run of a training carries (the sensor sets it): one run per training."""

_CONCURRENCY: dict[str, Any] = {
    "runs": {
        "max_concurrent_runs": 2,
        "tag_concurrency_limits": [
            {"key": "workflow", "value": {"applyLimitPerUniqueValue": True}, "limit": 1},
            {"key": TRAINING_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1},
        ],
    },
    "pools": {"default_limit": 1},
}

RUN_MONITORING: dict[str, Any] = {
    "enabled": True,
    "start_timeout_seconds": 180,
    "cancel_timeout_seconds": 180,
    "max_resume_run_attempts": 0,
    "poll_interval_seconds": 30,
}
"""The daemon marks a run failed when its process is gone (killed, crashed) or it never started
within 3 minutes; checked every 30 s. The default run launcher cannot resume a run, so none is."""

RUN_RETRIES: dict[str, Any] = {
    "enabled": True,
    "max_retries": 0,
    "retry_on_asset_or_op_failure": False,
}
"""Retries are on, per job (``dagster/max_retries`` tag; ``verdict_job`` sets 2), and only for
runs that failed *outside* an asset (a killed or crashed process): a refused input fails the
same way again, so it is not retried."""


WARM_PRELOAD: tuple[str, ...] = ("pandas", "pyarrow.parquet", "matplotlib.figure",
                                 "matplotlib.backends.backend_agg", "scipy.stats",
                                 "scipy.integrate")
"""What a verdict run and a study's finalize step import besides the code location (the code
location itself leaves them lazy): the warm run server imports them once, so a forked run, and
the study steps it forks in turn, do not."""

RUN_LAUNCHER: dict[str, Any] = {
    "module": "resources.launcher", "class": "WatchedRunLauncher",
    "config": {"warm_start": True, "preload_modules": list(WARM_PRELOAD)},
}
"""Dagster's default run launcher plus a health check, so run monitoring can see that a run's
process is gone (the default launcher cannot say), and a warm start: after a code location's
first run, its runs are forks of a process that imported it once (``resources/launcher.py``)."""


SQLITE_STORAGE: dict[str, Any] = {"module": "resources.sqlite_storage", "class": "PatientSqliteStorage"}
"""The embedded default's storage class: Dagster's SQLite storage, in the same files, whose run and
schedule databases wait 30 s for a busy file as its event logs do (Dagster's own: 5 s), and whose
event log shows the daemon's run retries a run's end only once the run's row says it ended: on a
busy machine Dagster's storage lost a killed run's retry both ways."""

POSTGRES_STORAGE: dict[str, Any] = {"module": "resources.postgres_storage", "class": "PatientPostgresStorage"}
"""Production's storage class: Dagster's PostgreSQL storage (the same configuration and tables)
whose event log shows the daemon's run retries a run's end only once the run's row says it ended
(two statements apart: a retry read between them skipped the run for good)."""


def _resilience() -> dict[str, Any]:
    return {"run_launcher": copy.deepcopy(RUN_LAUNCHER), "run_monitoring": dict(RUN_MONITORING),
            "run_retries": dict(RUN_RETRIES)}

RUN_COORDINATOR: dict[str, Any] = {
    "module": "resources.run_queue", "class": "PromptRunQueue",
    "config": {"dequeue_interval_seconds": 0.5},
}
"""The daemon's run queue looks for runs to launch every half second (Dagster's own queue: every
5 s by default, every 1 s at the shortest): a sensor's verdict run then waits about a quarter of
a second in the queue, not half a second or two and a half (``resources/run_queue.py``). Its
limits are the ``concurrency`` block's."""


def sqlite_instance_config(base_dir: Path) -> dict[str, Any]:
    """The embedded default: SQLite storage under ``base_dir`` (normally ``$DAGSTER_HOME``).

    The storage is Dagster's SQLite storage (the same files) with a 30-second busy timeout on
    every database and run ends read by the retry daemon once the runs' rows agree
    (:mod:`resources.sqlite_storage`, :data:`SQLITE_STORAGE`).

    >>> sqlite_instance_config(Path("/tmp/dh"))["storage"]["custom"]["config"]
    {'base_dir': '/tmp/dh'}
    """
    return {
        "storage": {"custom": {**copy.deepcopy(SQLITE_STORAGE), "config": {"base_dir": str(base_dir)}}},
        "concurrency": _CONCURRENCY,
        **_resilience(),
        "run_coordinator": copy.deepcopy(RUN_COORDINATOR),
        "telemetry": {"enabled": False},
    }


def check_pg_url(url: str, *, name: str = "DAGSTER_PG_URL") -> str:
    """Refuse a PostgreSQL URL that SQLAlchemy 2.1 would send to the missing psycopg 3 driver.

    Args:
        url: the URL as set in the environment.
        name: the variable's name, for the message.

    Returns:
        ``url`` unchanged.

    Raises:
        InputError: the URL does not start with ``postgresql+psycopg2://``.

    >>> check_pg_url("postgresql+psycopg2://u@h:5432/dagster")
    'postgresql+psycopg2://u@h:5432/dagster'
    >>> check_pg_url("postgresql://u@h/d")
    Traceback (most recent call last):
    ...
    typestrict_pipeline.errors.InputError: DAGSTER_PG_URL: expected a URL starting with postgresql+psycopg2://, got 'postgresql://u@h/d'. Write it as 'postgresql+psycopg2://u@h/d' (SQLAlchemy 2.1 maps postgresql:// to psycopg 3, which is not installed).
    """
    if url.startswith(f"{PG_SCHEME}://"):
        return url
    masked = _mask_password(url)
    rest = masked.split("://", 1)[1] if "://" in masked else masked
    raise InputError(
        f"a URL starting with {PG_SCHEME}://",
        repr(masked),
        f"write it as '{PG_SCHEME}://{rest}' (SQLAlchemy 2.1 maps postgresql:// to psycopg 3, "
        "which is not installed)",
        file=name,
    )


def _mask_password(url: str) -> str:
    """Hide the password of ``scheme://user:password@host`` (never echo a secret).

    >>> _mask_password("postgresql://u:secret@h/d")
    'postgresql://u:***@h/d'
    """
    head, sep, tail = url.partition("://")
    if not sep or "@" not in tail:
        return url
    userinfo, at, hostpart = tail.rpartition("@")
    if ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    return f"{head}://{userinfo}{at}{hostpart}"


def postgres_instance_config(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """PostgreSQL storage from the environment: ``DAGSTER_PG_URL``, else the ``DAGSTER_PG_*`` parts.

    The returned configuration names the variables (``{"env": ...}``) rather than copying their
    values, so the password never lands in ``dagster.yaml``.

    Args:
        env: the environment to check (default ``os.environ``).

    Returns:
        A dagster.yaml mapping.

    Raises:
        InputError: neither ``DAGSTER_PG_URL`` nor all five parts are set, or the URL has the
            wrong scheme.

    >>> cfg = postgres_instance_config({"DAGSTER_PG_URL": "postgresql+psycopg2://u@h/d"})
    >>> cfg["storage"]["custom"]["config"]
    {'postgres_url': {'env': 'DAGSTER_PG_URL'}}
    """
    environ = os.environ if env is None else env
    url = environ.get("DAGSTER_PG_URL")
    if url:
        check_pg_url(url)
        storage: dict[str, Any] = {"postgres_url": {"env": "DAGSTER_PG_URL"}}
    else:
        missing = [n for n in PG_PARTS if n not in environ]
        if missing:
            raise InputError(
                "DAGSTER_PG_URL, or all of " + ", ".join(PG_PARTS),
                "none of DAGSTER_PG_URL and " + ", ".join(missing) + " unset",
                "set them (an empty DAGSTER_PG_PASSWORD is allowed with trust auth); see docs/operations.md",
            )
        storage = {
            "postgres_db": {
                "hostname": {"env": "DAGSTER_PG_HOST"},
                "port": {"env": "DAGSTER_PG_PORT"},
                "username": {"env": "DAGSTER_PG_USERNAME"},
                "password": {"env": "DAGSTER_PG_PASSWORD"},
                "db_name": {"env": "DAGSTER_PG_DB"},
                "scheme": PG_SCHEME,
            }
        }
    return {
        "storage": {"custom": {**copy.deepcopy(POSTGRES_STORAGE), "config": storage}},
        "concurrency": {**_CONCURRENCY, "runs": {**_CONCURRENCY["runs"], "max_concurrent_runs": 4}},
        **_resilience(),
        "run_coordinator": copy.deepcopy(RUN_COORDINATOR),
        "telemetry": {"enabled": False},
    }


def write_instance_yaml(dagster_home: Path, config: Mapping[str, Any]) -> Path:
    """Write ``config`` to ``dagster_home/dagster.yaml`` atomically (temp file + rename).

    Returns:
        The path written.
    """
    text = yaml.safe_dump(dict(config), sort_keys=False)
    return write_atomic(dagster_home / "dagster.yaml", text.encode("utf-8"))
