"""The API's request and response bodies (pydantic models at the edge).

Requests refuse unknown fields (``extra="forbid"``), like manifests do, so a typo never silently
changes what is measured. Strings and lists are bounded so no request can ask for unbounded work.
No string of a request may hold a control character (NUL, escapes; line breaks only in the
fields listed in ``Strict.multiline``) nor an invisible format character (U+202E and the other
bidirectional controls, U+200B, U+FEFF, tags; allowed in the fields of ``Strict.customer_data``,
which hold or name the customer's data): :func:`typestrict_pipeline.values.control_character`,
the rule every stored text follows.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from typestrict_pipeline.refund.manifest import MAX_DECISIONS, MAX_PREDICTION_ROWS
from typestrict_pipeline.study.form import STUDY_NAME_MAX_CHARS
from typestrict_pipeline.values import control_character

Name = Annotated[str, Field(min_length=1, max_length=200)]
Text = Annotated[str, Field(min_length=1, max_length=10_000)]
Money = Annotated[Decimal | Annotated[str, Field(max_length=40)], Field(
    description="USD, as a JSON number (read exactly, never as a binary float) or a decimal string; "
                "at most 6 decimals", examples=[0.05, "0.05"])]
"""A USD amount: a JSON number (the API decodes JSON numbers as ``Decimal``) or a decimal string."""


class Strict(BaseModel):
    """A request body: unknown fields refused, no control character in any string; whole numbers
    and truth values are fields with ``strict=True`` (one spelling: ``20``, never ``"20"``,
    ``20.0`` or ``true``; ``true``/``false``, never ``1``, ``"yes"`` or ``"on"``)."""

    model_config = ConfigDict(extra="forbid")
    multiline: ClassVar[frozenset[str]] = frozenset()
    """Fields whose text may span lines (tab, line feed, carriage return allowed; NUL never)."""
    customer_data: ClassVar[frozenset[str]] = frozenset()
    """Fields that hold or name the customer's data (a column, an example's id, an answer):
    format characters are text as written there (a dataset may hold them); control characters
    are refused all the same."""

    @model_validator(mode="after")
    def _no_control_characters(self) -> Strict:
        for name in type(self).model_fields:
            data = name in self.customer_data
            found = _first_control(getattr(self, name), lines=name in self.multiline, data=data)
            if found is not None:
                where, ch, text = found
                # The refusal's place is the value's own (``grid.1``, ``params.'p\\u202e'``) and
                # what it got is that value (:func:`~typestrict_pipeline.api.errors.validation_message`
                # reads ``at`` and ``text``), not the whole object holding it.
                raise PydanticCustomError(
                    "control_character",
                    "text without control characters (such as NUL, escapes{lines}{format}), found {ch}",
                    {"at": (name, *where), "text": text, "ch": ch,
                     "lines": "" if name in self.multiline else ", line breaks",
                     "format": "" if data else ", invisible format characters such as U+202E"})
        return self


def _first_control(value: Any, *, lines: bool, data: bool) -> tuple[tuple[str | int, ...], str, str] | None:
    """Where the first control or format character of a request value is (its path inside the
    value: ``(2, "id")``), which (:func:`~typestrict_pipeline.values.control_character`) and the
    text holding it; or None. Nested request models check their own fields.

    >>> _first_control({"a": ["ok", "b\\x00"]}, lines=False, data=False)
    (('a', 1), 'U+0000', 'b\\x00')
    """
    if isinstance(value, str):
        ch = control_character(value, lines=lines, data=data)
        return None if ch is None else ((), ch, value)
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _first_control(item, lines=lines, data=data)
            if found is not None:
                return (i, *found[0]), found[1], found[2]
    if isinstance(value, dict):
        for key, item in value.items():
            found = (_first_control(key, lines=False, data=data)
                     or _first_control(item, lines=lines, data=data))
            if found is not None:
                return (str(key), *found[0]), found[1], found[2]
    return None


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    """Every answer that is not a success: ``{"error": {"code", "message"}}``."""

    error: ErrorDetail


class Columns(Strict):
    customer_data: ClassVar[frozenset[str]] = frozenset({"id", "text", "group", "review_label"})

    id: Name
    text: Name
    group: Annotated[Name | None, Field(description=(
        "The group column (customer, user, document, session...): whole groups are held out and "
        "resampled. Say null on purpose when every example stands alone; the verdict then says "
        "each example was resampled on its own."))] = None
    review_label: Name | None = None


class DatasetRef(Strict):
    """The dataset: a file of the workspace's own area (``PUT /v1/files/{name}``)."""

    path: Annotated[str, Field(min_length=1, max_length=1000)]
    format: Annotated[str, Field(pattern="^(csv|parquet|jsonl)$")] | None = None
    columns: Columns


class Decision(Strict):
    multiline: ClassVar[frozenset[str]] = frozenset({"question"})
    customer_data: ClassVar[frozenset[str]] = frozenset(
        {"answer_column", "answers", "options_column", "review_column"})

    name: Name
    question: Text
    answer_column: Name | None = None
    answers: Annotated[list[Name], Field(min_length=2, max_length=200)] | None = None
    options_column: Name | None = None
    review_column: Name | None = None


class Options(Strict):
    keep_if_loses: Annotated[bool, Field(strict=True)] = False


class TrainingCreate(Strict):
    """A new training: the manifest's fields (``docs/manifest.md``); Jev is the server's."""

    dataset: DatasetRef
    decisions: Annotated[list[Decision], Field(min_length=1, max_length=MAX_DECISIONS)]
    options: Options = Options()


class GroupingWarningOut(BaseModel):
    """A sign of groups the dataset does not declare, seen before judging (``refund.grouping``)."""

    kind: str
    column: str
    message: str
    sampled_rows: int


class TrainingOut(BaseModel):
    """A training: ``state`` is one of docs/lifecycle.md's (awaiting_predictions, judging, failed,
    settled, expired, cancelled); ``reason`` says why it is failed, expired or cancelled;
    ``deadline_at`` is when an open training expires (its credit then comes back)."""

    id: str
    workspace_id: str
    state: str
    keep_if_loses: bool
    decisions: list[str]
    verdict: str | None = None
    model_url: str | None = None
    reason: str | None = None
    deadline_at: str | None = None
    submissions: int = 0
    group: str | None = Field(description="the declared group column; null: none, each example is its own unit")
    grouping_warnings: list[GroupingWarningOut] | None = Field(
        default=None, description="signs of undeclared groups seen when the training was created "
        "(null: not looked at, a training registered by its manifest)")


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
    group: str | None = Field(description="the declared group column; null: none, each example is its own unit")
    resampling_unit: str
    grouping_warnings: list[GroupingWarningOut]


Probability = Annotated[Any, WithJsonSchema({"type": "number", "minimum": 0, "maximum": 1})]
"""A probability as sent, not coerced (``true`` or ``"0.6"`` would become 1.0 and 0.6): it is
checked by the predictions reader's one rule (``validate_probabilities``), which names the row,
the decision and the answer, as for a predictions file."""


class PredictionRow(Strict):
    customer_data: ClassVar[frozenset[str]] = frozenset({"id", "decision", "probabilities"})

    id: Annotated[str, Field(min_length=1, max_length=1000)]
    decision: Name
    probabilities: Annotated[dict[Annotated[str, Field(max_length=1000)], Probability],
                             Field(min_length=1, max_length=1000)]


class PredictionsIn(Strict):
    """The trained model's probabilities on the dataset (at least every test example)."""

    customer_data: ClassVar[frozenset[str]] = frozenset({"trained_on_ids"})

    predictions: Annotated[list[PredictionRow], Field(min_length=1, max_length=MAX_PREDICTION_ROWS)]
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
    unit: str = "example"
    n_units: int | None = None
    resampled: str = ""


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
    group: str | None = None  # the declared group column; null: none (each example its own unit)
    resampling_unit: str = ""  # the verdict's unit in words (refund.grouping.resampling_line)
    grouping_warnings: list[GroupingWarningOut] | None = None


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
    audit_sha256: str | None = None  # a settlement: the SHA-256 of the audit it settled


class StorageOut(BaseModel):
    """What the workspace keeps on the server and its storage quota (docs/api.md, "Limits")."""

    files: int
    bytes: int
    max_files: int
    max_bytes: int


class WorkspaceOut(BaseModel):
    workspace_id: str
    balance: int
    has_account: bool
    storage: StorageOut


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
    tune_steps: Annotated[int, Field(strict=True, ge=1, le=100_000)]
    eval_steps: Annotated[int, Field(strict=True, ge=1, le=100_000)]
    holdout_steps: Annotated[int, Field(strict=True, ge=1, le=100_000)]
    dataset: Name = "seattle_weather"
    step: Annotated[str, Field(max_length=20)] = "1d"
    folds: Annotated[int, Field(strict=True, ge=1, le=50)] = 3
    horizon_steps: Annotated[int, Field(strict=True, ge=1, le=10_000)] = 1
    grid: Annotated[list[Annotated[str, Field(max_length=2000)]], Field(max_length=20)] = []
    random: Annotated[list[Annotated[str, Field(max_length=200)]], Field(max_length=20)] = []
    random_draws: Annotated[int, Field(strict=True, ge=0, le=1000)] = 0
    seed: Annotated[int, Field(strict=True, ge=0, le=2**31)] = 0
    max_candidates: Annotated[int, Field(strict=True, ge=1, le=10_000)] | None = None
    max_total_steps: Annotated[int, Field(strict=True, ge=1, le=100_000_000)] | None = None
    budget_usd: Money | None = None
    min_unseen_steps: Annotated[int, Field(strict=True, ge=1, le=100_000)] | None = None
    name: Annotated[str, Field(min_length=1, max_length=STUDY_NAME_MAX_CHARS)] | None = None
    synthetic: Annotated[bool, Field(strict=True)] = False


class EstimateOut(BaseModel):
    candidates: int
    planned: int
    folds: int
    total_steps: int
    estimate_micro_usd: int | None
    text: str


class StudyOut(BaseModel):
    """A study: its state, spend and budget, and the Dagster run that runs it (``run_id``, shown
    in the Dagster UI; ``run_state`` ``queued``, ``running``, ``succeeded``, ``failed`` or
    ``cancelled``; none for a study made elsewhere), and how far its search is
    (``window_runs_done`` of ``window_runs_planned``: candidates × folds × tune and eval)."""

    id: int
    workspace_id: str
    workflow: str
    state: str
    stop_limit: str | None
    spend_micro_usd: int | None
    budget_micro_usd: int | None
    estimate_micro_usd: int | None
    error: str | None = None
    run_id: str | None = None
    run_state: str | None = None
    window_runs_done: int = 0
    window_runs_planned: int = 0


class ScheduleIn(Strict):
    cadence: Annotated[str, Field(min_length=1, max_length=20)] = "1d"
    owner: Annotated[str, Field(min_length=3, max_length=200)]
    min_unseen_steps: Annotated[int, Field(strict=True, ge=1, le=100_000)] | None = None


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


class PromoteIn(Strict):
    """``POST /v1/studies/{id}/promote`` takes no field: no body, or ``{}`` (any field is refused,
    as in every request body)."""


class PromoteOut(BaseModel):
    """What "Promote winner" did, through the evaluation gate (the keys of ``typestrict study
    promote --json``): ``promoted`` is ``"version"`` (the winner changed prompts: its version,
    ``version_id``, is now the active one in the workspace) or ``"parameters"`` (it changed only
    parameters: ``params`` now apply to the workflow's configuration in the workspace);
    ``message`` is the gate's sentence and what was done."""

    study_id: int
    promoted: Literal["version", "parameters"]
    version_id: str | None
    params: dict[str, Any]
    message: str


class LineageOut(BaseModel):
    study_id: int
    entries: list[dict[str, Any]]
    summary: dict[str, Any] | None
    text: str


Params = Annotated[dict[Annotated[str, Field(min_length=1, max_length=100)], Any], Field(max_length=50)]


class BacktestIn(Strict):
    """Run a backtest (the fields of ``typestrict backtest run``): the workflow's active version,
    one decision per step from ``start`` to ``end``, on a built-in dataset or one the workspace
    registered."""

    workflow: Name
    start: Annotated[str, Field(min_length=1, max_length=40)]
    end: Annotated[str, Field(min_length=1, max_length=40)]
    step: Annotated[str, Field(min_length=1, max_length=20)] = "1d"
    dataset: Name = "seattle_weather"
    params: Params = {}


class BacktestOut(BaseModel):
    """A backtest: ``queued`` until its Dagster run starts it, then ``running``, and how it ended
    (``completed``, ``stopped``, ``failed``, ``cancelled``...), HISTORICAL, with its cost."""

    id: str
    workspace_id: str
    workflow: str
    state: str
    mode: str
    version_id: str | None
    steps_planned: int | None
    steps_run: int
    cost_micro_usd: int
    mean_score: float | None
    error: str | None
    run_id: str | None
    card: str | None
    created_at: str | None
    finished_at: str | None


class WorkflowOut(BaseModel):
    """A workflow a backtest or a study may name: its active version, the tables it reads and the
    columns a dataset for it must have, its parameters and what its decisions are scored by."""

    workflow: str
    version_id: str
    tables: list[str]
    columns: dict[str, dict[str, str]] = Field(description=(
        "per table it reads, the columns a dataset for it must have (POST /v1/datasets and POST "
        "/v1/backtests refuse one without them), each with its kind: 'time' (event_time and known_time, "
        "ISO 8601 with a UTC offset), 'number' (empty for a missing value), 'bool' (true or false) "
        "or 'text'"), examples=[{"weather": {"event_time": "time", "known_time": "time",
                                            "precipitation": "number", "weather": "text"}}])
    params: dict[str, Any]
    scored_by: str


TableName = Annotated[str, Field(min_length=1, max_length=64)]
FileRef = Annotated[str, Field(min_length=1, max_length=1000)]


class DatasetIn(Strict):
    """Register a point-in-time dataset for a workflow: for each table it reads, a file of the
    workspace's files (``PUT /v1/files/{name}``) with ``event_time``, ``known_time`` and the
    value columns."""

    name: Annotated[str, Field(min_length=1, max_length=48)]
    workflow: Name
    tables: Annotated[dict[TableName, FileRef], Field(min_length=1, max_length=64)]


class AppendIn(Strict):
    """Append the rows of a workspace file to a table (the only one when ``table`` is left out)."""

    file: FileRef
    table: TableName | None = None


class TableOut(BaseModel):
    name: str
    rows: int
    columns: list[str]
    first_known: str
    last_known: str


class DatasetOut(BaseModel):
    name: str
    workflow: str
    registered_at: str
    last_known: str
    tables: list[TableOut]
    added: int | None = None


class BudgetIn(Strict):
    """The workspace's monthly usage budget in USD."""

    budget_usd: Money


class BudgetOut(BaseModel):
    workspace_id: str
    subscription: str
    budget_micro_usd: int | None
    spent_micro_usd: int
    period_start: str
    period_end: str
    exhausted: bool
    text: str


class ScheduleCancelIn(Strict):
    """Who cancels the schedule (kept with it)."""

    by: Annotated[str, Field(min_length=3, max_length=200)]


class NotificationSettingIn(Strict):
    """Turn "A scheduled study changes its winner" on or off for one person."""

    enabled: Annotated[bool, Field(strict=True)]
    kind: Annotated[str, Field(max_length=64)] = "study_winner_changed"


class NotificationSettingOut(BaseModel):
    person: str
    kind: str
    title: str
    enabled: bool


class DeliveryOut(BaseModel):
    id: int
    recipient: str
    subject: str
    state: str
    attempts: int
    created_at: str
    sent_at: str | None
    next_attempt_at: str | None
    last_error: str | None
    text: str


class NotificationsOut(BaseModel):
    """Settings → Notifications: each recipient's choice, and every delivery or failure."""

    settings: list[NotificationSettingOut]
    deliveries: list[DeliveryOut]
