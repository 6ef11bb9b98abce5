"""The words a settlement entry carries: what the verdict was and what happened to the credit."""

from __future__ import annotations

from typestrict_pipeline.refund.types import Verdict

__all__ = ["settlement_reason"]


def settlement_reason(
    verdict: Verdict,
    *,
    won: int | None = None,
    decisions: int | None = None,
    needed: int | None = None,
    failure_reason: str | None = None,
    retention_days: int = 30,
) -> str:
    """The reason recorded on a training's settlement entry.

    Args:
        verdict: the verdict being settled.
        won: decisions the model won (None when unknown or failed).
        decisions: decisions compared.
        needed: decisions it had to win.
        failure_reason: why the training failed (``failed`` only; recorded verbatim).
        retention_days: how long a kept model's files stay.

    Returns:
        One sentence.

    >>> settlement_reason(Verdict.REFUND, won=0, decisions=1, needed=1)
    'refund: the model did not beat Jev (won 0 of 1 decisions, needed 1); the credit comes back'
    >>> settlement_reason(Verdict.FAILED, failure_reason="Jev did not answer")
    'failed: the training failed (Jev did not answer); the credit comes back whatever keep_if_loses says'
    >>> settlement_reason(Verdict.KEPT, won=0, decisions=1, needed=1)
    'kept: the model did not beat Jev (won 0 of 1 decisions, needed 1) and keep_if_loses is on; delivered, files kept 30 days, no refund'
    """
    verdict = Verdict(verdict)
    score = ""
    if won is not None and decisions is not None:
        score = f" (won {won} of {decisions} decisions" + (f", needed {needed})" if needed else ")")
    if verdict is Verdict.BEATS:
        return f"beats: the model beats Jev{score}; the credit stays spent"
    if verdict is Verdict.KEPT:
        return (
            f"kept: the model did not beat Jev{score} and keep_if_loses is on; delivered, files kept "
            f"{retention_days} days, no refund"
        )
    if verdict is Verdict.REFUND:
        return f"refund: the model did not beat Jev{score}; the credit comes back"
    why = failure_reason.strip() if failure_reason and failure_reason.strip() else "no reason given"
    return f"failed: the training failed ({why}); the credit comes back whatever keep_if_loses says"
