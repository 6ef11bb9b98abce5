"""Resources of the credits area: the retention setting (key ``credits``).

The store itself is the shared ``store`` resource (``resources/store.py``); where trainings and
audits live is the refund area's ``refund_trainings`` resource.
"""

from typing import Any

import dagster as dg

from typestrict_pipeline.credits import DEFAULT_RETENTION_DAYS, RetentionPolicy


class CreditsResource(dg.ConfigurableResource["CreditsResource"]):
    """Settings of the credit ledger and the model files' retention.

    Attributes:
        retention_days: how long a model's files stay after its verdict is settled (default 30,
            as the product promises). Applies to verdicts settled from then on: each record
            keeps the expiry it was given.
    """

    retention_days: int = DEFAULT_RETENTION_DAYS

    def policy(self) -> RetentionPolicy:
        """The retention policy (validated: at least one day)."""
        return RetentionPolicy(self.retention_days)


def default_resources() -> dict[str, Any]:
    """``{"credits": CreditsResource()}``."""
    return {"credits": CreditsResource()}
