"""TypeStrict Pipeline: refund verdicts against Jev, backtests and studies.

The pure core lives in this package and imports nothing from Dagster; ``assets/`` and
``resources/`` wire it into a Dagster code location (``typestrict_pipeline.definitions``).
"""

__version__ = "0.1.0"
