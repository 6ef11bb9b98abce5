"""The API's request and response bodies (pydantic models at the edge).

Requests refuse unknown fields (``extra="forbid"``), like manifests do, so a typo never silently
changes what is measured. Strings and lists are bounded so no request can ask for unbounded work.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

Name = Annotated[str, Field(min_length=1, max_length=200)]
Text = Annotated[str, Field(min_length=1, max_length=10_000)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    """Every answer that is not a success: ``{"error": {"code", "message"}}``."""

    error: ErrorDetail


class Columns(Strict):
    id: Name
    text: Name
    group: Name | None = None
    review_label: Name | None = None


class DatasetRef(Strict):
    """The dataset: a file of the workspace's own area (``PUT /v1/files/{name}``)."""

    path: Annotated[str, Field(min_length=1, max_length=1000)]
    format: Annotated[str, Field(pattern="^(csv|parquet|jsonl)$")] | None = None
    columns: Columns


class Decision(Strict):
    name: Name
    question: Text
    answer_column: Name | None = None
    answers: Annotated[list[Name], Field(min_length=2, max_length=200)] | None = None
    options_column: Name | None = None
    review_column: Name | None = None


class Options(Strict):
    keep_if_loses: bool = False


class TrainingCreate(Strict):
    """A new training: the manifest's fields (``docs/manifest.md``); Jev is the server's."""

    dataset: DatasetRef
    decisions: Annotated[list[Decision], Field(min_length=1, max_length=50)]
    options: Options = Options()


class TrainingOut(BaseModel):
    id: str
    workspace_id: str
    state: str
    keep_if_loses: bool
    decisions: list[str]
    verdict: str | None = None
    model_url: str | None = None


class DecisionSplit(BaseModel):
    decision: str
    source: str
    n_rows: int
    n_labeled: int
    n_test: int
    n_train: int
    n_excluded: int
    grouped: bool
    capped: bool
    test_ids: list[str]
    excluded_ids: list[str]


class SplitOut(BaseModel):
    """What may be trained on, before training."""

    training_id: str
    training_ids: list[str]
    training_ids_sha256: str
    canonical_form: str
    not_for_training: list[str]
    decisions: list[DecisionSplit]


Probability = Annotated[float, Field(ge=0.0, le=1.0)]


class PredictionRow(Strict):
    id: Annotated[str, Field(min_length=1, max_length=1000)]
    decision: Name
    probabilities: Annotated[dict[Annotated[str, Field(max_length=1000)], Probability],
                             Field(min_length=1, max_length=1000)]


class PredictionsIn(Strict):
    """The trained model's probabilities on the dataset (at least every test example)."""

    predictions: Annotated[list[PredictionRow], Field(min_length=1, max_length=200_000)]
    trained_on_sha256: Annotated[str, Field(pattern="^[0-9a-fA-F]{64}$")] | None = None
    trained_on_ids: Annotated[list[Annotated[str, Field(min_length=1, max_length=1000)]],
                              Field(min_length=1, max_length=200_000)] | None = None
    trained_on_id_sha256: Annotated[list[Annotated[str, Field(pattern="^[0-9a-f]{64}$")]],
                                    Field(min_length=1, max_length=200_000)] | None = None


class MetricPair(BaseModel):
    metric: str
    model: float | None
    jev: float | None
    delta: float | None
    margin: str


class DecisionVerdict(BaseModel):
    name: str
    n: int
    beats: bool
    gain: float
    q05: float
    gain_is_real: bool
    nothing_collapses: bool
    metrics: list[MetricPair]
    n_unlabeled: int | None = None
    unlabeled: str | None = None


class VerdictOut(BaseModel):
    model_id: str
    workspace_id: str
    verdict: str
    refunds_credit: bool
    settling_decision: str | None
    won: int
    needed: int
    failure_reason: str | None
    keep_if_loses: bool
    delivered: bool
    files_state: str
    files_expire_at: str
    audit_sha256: str | None
    decisions: list[DecisionVerdict]
    trained_on: str | None = None  # "attested" / "not stated" (None: an audit before format 3)
    trained_on_n_ids: int | None = None


class FileOut(BaseModel):
    name: str
    size: int


class FilesOut(BaseModel):
    model_id: str
    expires_at: str
    files: list[FileOut]


class LedgerLineOut(BaseModel):
    id: int
    kind: str
    reference: str
    training_id: str | None
    amount: int
    balance_after: int
    verdict: str | None
    reason: str
    created_at: str


class WorkspaceOut(BaseModel):
    workspace_id: str
    balance: int
    has_account: bool


class UsageRowOut(BaseModel):
    day: str
    workflow: str
    mode: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost_micro_usd: int


class StudySpendOut(BaseModel):
    study_id: int
    name: str | None
    workflow: str
    day: str
    state: str
    spend_micro_usd: int | None
    budget_micro_usd: int | None
    deleted: bool = False  # a deleted study's spend stays, under its id, marked deleted


class SpendOut(BaseModel):
    """Spend of one UTC day (or workflow, or the whole period), in micro-USD."""

    key: str
    backtests_micro_usd: int
    studies_micro_usd: int
    live_micro_usd: int
    historical_micro_usd: int
    calls: int


class UsageOut(BaseModel):
    """Settings → Usage: spend by UTC day and by workflow, backtests, studies (both HISTORICAL)
    and live runs (LIVE) apart; every metered call group and each study's spend."""

    workspace_id: str
    by_day: list[SpendOut]
    by_workflow: list[SpendOut]
    total: SpendOut
    calls: list[UsageRowOut]
    studies: list[StudySpendOut]


class StudyFormIn(Strict):
    """The "new study" form (the same fields as ``typestrict study run``)."""

    workflow: Name
    start: Annotated[str, Field(max_length=40)]
    end: Annotated[str, Field(max_length=40)]
    tune_steps: Annotated[int, Field(ge=1, le=100_000)]
    eval_steps: Annotated[int, Field(ge=1, le=100_000)]
    holdout_steps: Annotated[int, Field(ge=1, le=100_000)]
    dataset: Name = "seattle_weather"
    step: Annotated[str, Field(max_length=20)] = "1d"
    folds: Annotated[int, Field(ge=1, le=50)] = 3
    horizon_steps: Annotated[int, Field(ge=1, le=10_000)] = 1
    grid: Annotated[list[Annotated[str, Field(max_length=2000)]], Field(max_length=20)] = []
    random: Annotated[list[Annotated[str, Field(max_length=200)]], Field(max_length=20)] = []
    random_draws: Annotated[int, Field(ge=0, le=1000)] = 0
    seed: Annotated[int, Field(ge=0, le=2**31)] = 0
    max_candidates: Annotated[int, Field(ge=1, le=10_000)] | None = None
    max_total_steps: Annotated[int, Field(ge=1, le=100_000_000)] | None = None
    budget_usd: Annotated[str, Field(max_length=30)] | None = None
    min_unseen_steps: Annotated[int, Field(ge=1, le=100_000)] | None = None
    name: Name | None = None
    synthetic: bool = False


class EstimateOut(BaseModel):
    candidates: int
    planned: int
    folds: int
    total_steps: int
    estimate_micro_usd: int | None
    text: str


class StudyOut(BaseModel):
    id: int
    workspace_id: str
    workflow: str
    state: str
    stop_limit: str | None
    spend_micro_usd: int | None
    budget_micro_usd: int | None
    estimate_micro_usd: int | None


class ScheduleIn(Strict):
    cadence: Annotated[str, Field(min_length=1, max_length=20)] = "1d"
    owner: Annotated[str, Field(min_length=3, max_length=200)]
    min_unseen_steps: Annotated[int, Field(ge=1, le=100_000)] | None = None


class ScheduleOut(BaseModel):
    id: int
    study_id: str
    cadence: str
    state: str
    owner: str
    min_unseen_steps: int
    last_outcome: str | None
    last_message: str | None
    status_text: str


class SchedulesOut(BaseModel):
    schedules: list[ScheduleOut]


class LineageOut(BaseModel):
    study_id: int
    entries: list[dict[str, Any]]
    summary: dict[str, Any] | None
    text: str
