"""Studies: a search over candidates and time folds, ranked honestly (no Dagster import here).

Modules: ``stats`` (exact e(N), Newey–West SE, luck-adjusted ranking), ``folds`` (walk-forward
folds, gap, embargo, sealed holdout), ``space`` (grid, seeded random draws, prompt
alternatives), ``limits`` (required limits, the USD estimate, micro-USD formatting),
``tables`` / ``repository`` (the store: the one-study lock, reservations, settlement),
``runner`` (window runs under the budget guard, finalize with the holdout), ``backends``
/ ``setups`` (the backtest engine or a synthetic workflow), ``leaderboard``, ``promote``
(the evaluation gate) and ``service`` (create and run a study from one configuration).
Method and sources: ``docs/method/studies.md``.
"""
