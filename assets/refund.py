"""Dagster wiring for the refund area: one partition per training, one verdict per partition.

Asset group ``refund``, partitioned by the dynamic partitions definition ``trainings`` (a partition
key is a training id; its manifest is found by the ``refund_trainings`` resource)::

    dataset → holdout → jev_predictions ─┐
                     └→ model_predictions → metrics → verdict → audit

``verdict`` carries two asset checks, "the gain is real" and "nothing collapses"; ``verdict_job``
materializes the whole group for one partition. Every number comes from the pure core
(``typestrict_pipeline.refund``); this module only reads settings, calls it, and shows results.

A training that failed on our side goes through the same chain: no dataset is read, no
predictions are asked, and the verdict is ``failed`` with the manifest's reason.
"""

import datetime as dt
import hashlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dagster as dg

from resources.failures import failure, product_failure
from resources.refund import RefundModelClientResource, RefundTrainingsResource, SystemAnswers
from resources.store import StoreResource
from typestrict_pipeline import plots
from typestrict_pipeline.credits import SettledAuditError, settled_audit_sha256
from typestrict_pipeline.files import write_atomic
from typestrict_pipeline.progress import (
    Progress,
    ProgressFn,
    clear_progress,
    every,
    training_key,
    write_progress,
)
from typestrict_pipeline.refund.audit import audit_bytes, build_audit
from typestrict_pipeline.refund.dataset import Dataset, unlabeled_from_split, unlabeled_text
from typestrict_pipeline.refund.explain import decision_reason, facts_from_report, verdict_sentence
from typestrict_pipeline.refund.grouping import GroupingScan, resampling_line
from typestrict_pipeline.refund.holdout import Holdout, keep_test_rows, split_decisions
from typestrict_pipeline.refund.manifest import (
    TrainingManifest,
    TrainingStatus,
)
from typestrict_pipeline.refund.metrics import GAIN_FORMULA, MAX_DROP, METRIC_NAMES
from typestrict_pipeline.refund.predictions import build_decision_data
from typestrict_pipeline.refund.preflight import check_training
from typestrict_pipeline.refund.rule import (
    DecisionReport,
    MarginStatus,
    TrainingJudgement,
    failed_training,
    judge_decision,
    judge_training,
)
from typestrict_pipeline.refund.runreads import ColumnCache, drop_shared_reads, shared_reads
from typestrict_pipeline.refund.trained_on import NOT_STATED, Attestation, attest
from typestrict_pipeline.refund.unsettled import UNSETTLED_AFTER, RunSummary, find_unsettled
from typestrict_pipeline.store import typestrict_home

if TYPE_CHECKING:
    import pandas as pd

GROUP = "refund"
trainings_partitions = dg.DynamicPartitionsDefinition(name="trainings")

_JEV_NAME = "Jev"
_RESOURCE_TRAININGS = "refund_trainings"


# ------------------------------------------------------------------------------------------------
# Values passed between assets (plain, picklable)
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedTraining:
    """The ``dataset`` asset's value: the manifest, and the dataset unless the training failed."""

    manifest: TrainingManifest
    dataset: Dataset | None
    grouping: GroupingScan | None = None

    @property
    def failed(self) -> bool:
        return self.manifest.status is TrainingStatus.FAILED


# ------------------------------------------------------------------------------------------------
# Presentation (pure: tested directly)
# ------------------------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _fmt_delta(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.4f}"


def metrics_table_markdown(report: DecisionReport, *, jev_label: str = _JEV_NAME) -> str:
    """The four metrics of both systems side by side, with deltas and margins (Markdown).

    ``Δ`` is model − Jev; the margin column shows the largest drop allowed and whether it held.
    """
    lines = [
        f"| metric | model | {jev_label} | Δ (model − Jev) | margin | held |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name in METRIC_NAMES:
        status = report.margins[name]
        held = {
            MarginStatus.HELD: "yes",
            MarginStatus.BROKEN: "**NO**",
            MarginStatus.NOT_APPLICABLE: "n/a (no answer with 5 test examples)",
        }[status]
        margin = MAX_DROP[name]
        lines.append(
            f"| {name} | {_fmt(report.model.value(name))} | {_fmt(report.jev.value(name))} | "
            f"{_fmt_delta(report.deltas[name])} | -{float(margin):.2f} | {held} |"
        )
    return "\n".join(lines)


def metrics_table(report: DecisionReport, *, jev_label: str = _JEV_NAME) -> dg.TableMetadataValue:
    """The four metrics of both systems as a native table (shown without "Show Markdown")."""
    schema = dg.TableSchema(columns=[
        dg.TableColumn("metric", "string"), dg.TableColumn("model", "float"),
        dg.TableColumn(jev_label, "float"), dg.TableColumn("Δ (model − Jev)", "float"),
        dg.TableColumn("largest drop allowed", "float"), dg.TableColumn("margin", "string"),
    ])
    records = []
    for name in METRIC_NAMES:
        m, j, d = report.model.value(name), report.jev.value(name), report.deltas[name]
        records.append(dg.TableRecord({
            "metric": name,
            "model": None if m is None else plots.for_reading(m),
            jev_label: None if j is None else plots.for_reading(j),
            "Δ (model − Jev)": None if d is None else plots.for_reading(d),
            "largest drop allowed": float(MAX_DROP[name]),
            "margin": report.margins[name].value,
        }))
    return dg.MetadataValue.table(records=records, schema=schema)


def decision_summary_markdown(report: DecisionReport, *, jev_label: str = _JEV_NAME) -> str:
    """One decision: the table, G, its 5th percentile, the count of G ≤ 0, the outcome."""
    boot = report.bootstrap
    outcome = "beats" if report.beats else "does not beat"
    return "\n".join(
        [
            f"### Decision `{report.name}`: model {outcome} {jev_label} (n = {report.n} test examples)",
            "",
            metrics_table_markdown(report, jev_label=jev_label),
            "",
            f"- G = {GAIN_FORMULA} = **{report.gain:+.4f}**",
            f"- 5th percentile of G over {boot.resamples:,} paired resamples: **{boot.q05:+.4f}** "
            f"(G ≤ 0 in {boot.n_gain_le_0:,} of {boot.resamples:,})",
            *_group_check_lines(report),
            f"- the gain is real ({_real_rule(report)}): "
            f"{'yes' if report.gain_is_real else 'no'}; "
            f"nothing collapses: {'yes' if report.nothing_collapses else 'no'}",
        ]
    )


def _real_rule(report: DecisionReport) -> str:
    return "q05 > 0" if report.group_check is None else "q05 > 0 and the group check passes"


def _group_check_lines(report: DecisionReport) -> list[str]:
    """The group check of a grouped decision (audit format 4), one line; none without groups."""
    c = report.group_check
    if c is None:
        return []
    if c.se is None or c.t is None or c.lower is None:
        return [f"- group check: {c.n_groups} group: nothing beyond that group can be said "
                "(a gain over one group is never real)"]
    return [f"- group check ({c.n_groups} groups, {c.effective_groups} effective): "
            f"G − t({c.df}) · se = {report.gain:+.4f} − {c.t} · {c.se:.4f} = **{c.lower:+.4f}** "
            f"({'passed' if c.passed else 'not passed'})"]


def bootstrap_picture_markdown(report: DecisionReport) -> str:
    """The bootstrap distribution of G with q05 and 0 marked, as an embedded Markdown image."""
    boot = report.bootstrap
    png = plots.bootstrap_png(boot.gains, boot.q05, gain=report.gain,
                              title=f"{report.name}: bootstrap of G ({boot.resamples} resamples)")
    return plots.png_markdown(png, f"bootstrap of G for {report.name}")


def metrics_picture_markdown(report: DecisionReport, *, jev_label: str = _JEV_NAME) -> str:
    """Each metric, model vs Jev, against its margin, as an embedded Markdown image."""
    png = plots.metrics_png(
        list(METRIC_NAMES), [report.model.value(m) for m in METRIC_NAMES],
        [report.jev.value(m) for m in METRIC_NAMES], [float(MAX_DROP[m]) for m in METRIC_NAMES],
        jev_label=jev_label,
    )
    return plots.png_markdown(png, f"metrics of {report.name}: model vs {jev_label}")


def unit_line(judgement: TrainingJudgement, group_column: str | None) -> str:
    """The verdict's resampling unit in words (``refund.grouping.resampling_line``)."""
    return resampling_line(
        [(r.name, r.bootstrap.unit.value, r.bootstrap.n_units) for r in judgement.decisions],
        group_column)


def verdict_markdown(judgement: TrainingJudgement, *, jev_label: str = _JEV_NAME,
                     group_column: str | None = None) -> str:
    """The whole verdict as Markdown (what the ``verdict`` asset shows in the UI)."""
    head = f"## Verdict: **{judgement.verdict.value}**"
    if judgement.failure_reason is not None:
        return "\n".join(
            [head, "", f"The training failed: {judgement.failure_reason}", "",
             "The credit comes back (a failed training always refunds)."]
        )
    n = len(judgement.decisions)
    credit = "comes back" if judgement.refunds_credit else "stays spent"
    parts = [
        head,
        "",
        verdict_sentence(judgement),
        "",
        unit_line(judgement, group_column),
        "",
        f"Decisions won: {judgement.won} of {n} (needed {judgement.needed}); "
        f"settling decision: `{judgement.settling_decision}`; the credit {credit}.",
    ]
    for report in judgement.decisions:
        parts += ["", decision_summary_markdown(report, jev_label=jev_label)]
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------
# Assets
# ------------------------------------------------------------------------------------------------


def run_progress(context: dg.AssetExecutionContext, *, percent: int = 10) -> ProgressFn:
    """Progress of long work in this run: a log line and an observation of the asset with the
    figures every ``percent`` %, and the latest report where the console reads it
    (:func:`typestrict_pipeline.progress.read_progress` with the run id, and with the
    training's :func:`~typestrict_pipeline.progress.training_key`)."""
    home = typestrict_home()
    keys = _progress_keys(context)

    def report(p: Progress) -> None:
        context.log.info(p.line())
        metadata: dict[str, Any] = {"progress": p.line(), f"{p.unit} done": p.done}
        if p.percent is not None:
            metadata["percent"] = dg.MetadataValue.float(round(p.percent, 1))
        context.log_event(dg.AssetObservation(
            asset_key=context.asset_key,
            partition=context.partition_key if context.has_partition_key else None,
            metadata=metadata,
        ))
        for key in keys:
            write_progress(home, key, p)

    return every(percent, report)


def run_reads(context: dg.AssetExecutionContext) -> AbstractContextManager[ColumnCache]:
    """The run's shared reads of its dataset (``refund.runreads``): the id and text columns read
    once, by the first step, serve the run's other steps in this process."""
    return shared_reads(context.run.run_id)


def _progress_keys(context: dg.AssetExecutionContext) -> list[str]:
    """Where this run's progress is recorded: its run id, and its training's key."""
    keys = [context.run.run_id]
    if context.has_partition_key:
        keys.append(training_key(context.partition_key))
    return keys


def _training_id(context: dg.AssetExecutionContext) -> str:
    key: str = context.partition_key
    return key


@dg.asset(
    group_name=GROUP,
    partitions_def=trainings_partitions,
    kinds={"python"},
    description="The training's manifest and its validated dataset (not read for a failed training).",
)
def dataset(
    context: dg.AssetExecutionContext, refund_trainings: RefundTrainingsResource
) -> dg.MaterializeResult[LoadedTraining]:
    training_id = _training_id(context)
    with product_failure():
        manifest = refund_trainings.load(training_id)
    meta: dict[str, Any] = {
        "training_id": training_id,
        "workspace_id": manifest.workspace_id,
        "status": manifest.status.value,
        "decisions": ", ".join(d.name for d in manifest.decisions),
        "keep_if_loses": manifest.options.keep_if_loses,
    }
    if manifest.status is TrainingStatus.FAILED:
        meta["failure_reason"] = manifest.failure_reason or ""
        return dg.MaterializeResult(value=LoadedTraining(manifest, None), metadata=meta)
    # Every input (dataset, each predictions file in full, each endpoint) is checked before this
    # first asset returns: a bad training fails here and nothing of it is stored, not even the
    # progress its check reported while reading (the run's log keeps those lines).
    try:
        with product_failure(manifest), run_reads(context):
            checked = check_training(manifest, progress=run_progress(context))
    except BaseException:
        for key in _progress_keys(context):
            clear_progress(typestrict_home(), key)
        raise
    data = checked.dataset
    assert data is not None
    for line in checked.checked:
        context.log.info("checked %s", line)
    meta["rows"] = data.n_rows
    meta["grouped"] = data.columns.group is not None
    meta["group column"] = data.columns.group or "none declared: each example is its own unit"
    grouping = checked.grouping
    if grouping is not None:
        meta["grouping warnings"] = _warnings_text(grouping)
        for w in grouping.warnings:
            context.log.warning("undeclared groups? %s", w.message)
    for labels in data.decisions:
        meta[f"labeled[{labels.name}]"] = labels.n_labeled
        meta[f"unlabeled[{labels.name}]"] = unlabeled_text(labels.n_labeled, data.n_rows)
    return dg.MaterializeResult(value=LoadedTraining(manifest, data, grouping), metadata=meta)


@dataclass(frozen=True)
class TrainingHoldout:
    """The ``holdout`` asset's value: each decision's split, and every example's role.

    Attributes:
        training: the upstream :class:`LoadedTraining`.
        holdouts: one split per decision, in manifest order (empty for a failed training).
    ``roles`` (one row per decision and example: ``decision, id, group, answer, role``) is built
    when asked for, not stored: a 10-million-row split passes between steps as its columns.
    """

    training: LoadedTraining
    holdouts: tuple[Holdout, ...]
    trained_on: Attestation = NOT_STATED

    @property
    def roles(self) -> "pd.DataFrame":
        """Every example of every decision with its role (a DataFrame of every row)."""
        return roles_frame(self.holdouts)

    def holdout(self, decision: str) -> Holdout:
        for h in self.holdouts:
            if h.decision == decision:
                return h
        raise KeyError(f"no split for decision {decision!r}; have {[h.decision for h in self.holdouts]}")


def roles_frame(holdouts: Sequence[Holdout], *, head: int | None = None) -> "pd.DataFrame":
    """Every example of every decision with its role (``test`` / ``train`` / ``excluded``);
    with ``head``, only the first ``head`` rows."""
    import pandas as pd  # on first use: keeps the code location's load quick (lazy.py)
    import pyarrow as pa

    columns = ["decision", "id", "group", "answer", "role"]
    if not holdouts:
        return pd.DataFrame(columns=columns)
    # built from the splits' columns: no Python object per row
    table = pa.concat_tables([h.columns(head) for h in holdouts], promote_options="permissive")
    if head is not None:
        table = table.slice(0, head)
    frame = table.to_pandas()
    frame["decision"] = frame["decision"].astype(str)
    return frame[columns]


@dg.asset(
    group_name=GROUP,
    partitions_def=trainings_partitions,
    kinds={"pandas"},
    description="Each decision's held-out test examples; every example listed with its role.",
)
def holdout(
    context: dg.AssetExecutionContext, dataset: LoadedTraining
) -> dg.MaterializeResult[TrainingHoldout]:
    with run_reads(context):
        return _split(context, dataset)


def _split(
    context: dg.AssetExecutionContext, dataset: LoadedTraining
) -> dg.MaterializeResult[TrainingHoldout]:
    """The ``holdout`` asset's work: every decision's split, what the training stated, a preview."""
    if dataset.dataset is None:
        return dg.MaterializeResult(
            value=TrainingHoldout(dataset, ()),
            metadata={"status": "failed training: no split needed"},
        )
    holdouts = split_decisions(dataset.dataset)
    keep_test_rows(dataset.dataset, holdouts)  # for the steps after: one read for all decisions
    manifest = dataset.manifest
    # A model that may have seen test rows is never judged (refund/trained_on.py); what the
    # training stated (or that it stated nothing) goes into the audit.
    with product_failure(manifest, "model"):
        trained_on = attest(manifest.trained_on, manifest.trained_on_sha256, holdouts,
                            training_id=manifest.training_id, source=manifest.source)
    meta: dict[str, Any] = {"dagster/row_count": sum(h.summary.n_rows for h in holdouts),
                            "trained_on": trained_on.describe()}
    lines = ["| decision | test | train | excluded | test groups | capped |", "|---|---:|---:|---:|---:|---|"]
    for h in holdouts:
        s = h.summary
        meta[f"{h.decision}: test"] = s.n_test
        meta[f"{h.decision}: train"] = s.n_train
        meta[f"{h.decision}: excluded"] = s.n_excluded
        meta[f"{h.decision}: unlabeled"] = unlabeled_text(s.n_labeled, s.n_rows)
        meta[f"{h.decision}: rows joined by identical text"] = s.rows_joined_by_text
        lines.append(
            f"| {h.decision} | {s.n_test} | {s.n_train} | {s.n_excluded} | {s.groups_test} | "
            f"{'yes' if s.capped else 'no'} |"
        )
    meta["split"] = dg.MetadataValue.md("\n".join(lines))
    meta["preview"] = dg.MetadataValue.md(roles_frame(holdouts, head=10).to_markdown(index=False))
    context.log.info("held out %s", ", ".join(f"{h.decision}: {h.summary.n_test}" for h in holdouts))
    return dg.MaterializeResult(value=TrainingHoldout(dataset, holdouts, trained_on),
                                metadata=meta)


def _ask(
    context: dg.AssetExecutionContext,
    client_resource: RefundModelClientResource,
    holdout: TrainingHoldout,
    *,
    system: str,
) -> dg.MaterializeResult[SystemAnswers]:
    training = holdout.training
    manifest = training.manifest
    source = manifest.jev if system == "jev" else manifest.model
    if training.dataset is None:
        return dg.MaterializeResult(
            value=SystemAnswers.none(system, client_resource.label),
            metadata={"status": "failed training: no predictions needed"},
        )
    with product_failure(manifest, system), run_reads(context):
        asked = client_resource.predict(
            system=system, source=source, dataset=training.dataset, holdouts=holdout.holdouts,
            log=context.log,
        )
    meta: dict[str, Any] = {
        "system": asked.label,
        "system_id": asked.system_id,
        "predictions": len(asked.predictions.predictions),
        "calls": asked.usage.calls,
        "prompt_tokens": asked.usage.prompt_tokens,
        "completion_tokens": asked.usage.completion_tokens,
        "seconds": dg.MetadataValue.float(plots.for_reading(asked.seconds, 2)),
    }
    return dg.MaterializeResult(value=asked, metadata=meta)


@dg.asset(
    group_name=GROUP,
    partitions_def=trainings_partitions,
    kinds={"python"},
    description="Jev's probabilities on every decision's test examples: the same question and "
    "examples as the model, used only to measure.",
)
def jev_predictions(
    context: dg.AssetExecutionContext,
    refund_jev_client: RefundModelClientResource,
    holdout: TrainingHoldout,
) -> dg.MaterializeResult[SystemAnswers]:
    return _ask(context, refund_jev_client, holdout, system="jev")


@dg.asset(
    group_name=GROUP,
    partitions_def=trainings_partitions,
    kinds={"python"},
    description="The trained model's probabilities on every decision's test examples.",
)
def model_predictions(
    context: dg.AssetExecutionContext,
    refund_model_client: RefundModelClientResource,
    holdout: TrainingHoldout,
) -> dg.MaterializeResult[SystemAnswers]:
    return _ask(context, refund_model_client, holdout, system="model")


@dataclass(frozen=True)
class TrainingMetrics:
    """The ``metrics`` asset's value: each decision's report (none for a failed training)."""

    training: LoadedTraining
    reports: tuple[DecisionReport, ...]
    model_id: str
    jev_id: str
    split: dict[str, Any]
    jev_label: str = _JEV_NAME
    trained_on: Attestation = NOT_STATED


def _decisions_table(judgement: TrainingJudgement) -> dg.TableMetadataValue:
    """Every decision in one native table: G, q05, the count of G ≤ 0, the outcome and why."""
    schema = dg.TableSchema(columns=[
        dg.TableColumn("decision", "string"),
        dg.TableColumn("G", "float", description=GAIN_FORMULA),
        dg.TableColumn("q05", "float", description="5th percentile of G over the paired resamples"),
        dg.TableColumn("G <= 0 in", "string"),
        dg.TableColumn("beats Jev", "bool"),
        dg.TableColumn("why", "string"),
    ])
    records = [
        dg.TableRecord({
            "decision": r.name,
            "G": plots.for_reading(r.gain),
            "q05": plots.for_reading(r.bootstrap.q05),
            "G <= 0 in": f"{r.bootstrap.n_gain_le_0:,} of {r.bootstrap.resamples:,}",
            "beats Jev": r.beats,
            "why": decision_reason(facts_from_report(r)),
        })
        for r in judgement.decisions
    ]
    return dg.MetadataValue.table(records=records, schema=schema)


def _warnings_text(scan: GroupingScan) -> dg.TextMetadataValue:
    lines = [w.message + "." for w in scan.warnings]
    return dg.MetadataValue.text(
        "\n".join(lines) if lines else f"none seen in the first {scan.sampled_rows:,} rows")


def _verdict_metadata(
    judgement: TrainingJudgement, jev_label: str, split: Mapping[str, Any] | None = None,
    grouping: GroupingScan | None = None, group_column: str | None = None,
) -> dict[str, Any]:
    # Native values first (text, floats, a table): the UI shows them as they are, without
    # "Show Markdown"; the Markdown report and the pictures follow.
    meta: dict[str, Any] = {
        "why": dg.MetadataValue.text(verdict_sentence(judgement)),
        "verdict": dg.MetadataValue.text(judgement.verdict.value),
        "refunds_credit": judgement.refunds_credit,
    }
    for name, (_, why) in unlabeled_from_split(dict(split or {})).items():
        meta[f"unlabeled[{name}]"] = why
    if judgement.failure_reason is not None:
        meta["failure_reason"] = dg.MetadataValue.text(judgement.failure_reason)
        meta["report"] = dg.MetadataValue.md(verdict_markdown(judgement, jev_label=jev_label))
        return meta
    # The unit in words and the signs of undeclared groups seen before judging (they change no
    # number: refund/grouping.py).
    meta["resampling unit"] = dg.MetadataValue.text(unit_line(judgement, group_column))
    if grouping is not None:
        meta["grouping warnings"] = _warnings_text(grouping)
    meta["settling_decision"] = dg.MetadataValue.text(judgement.settling_decision or "")
    meta["decisions_won"] = dg.MetadataValue.text(
        f"{judgement.won} of {len(judgement.decisions)} (needed {judgement.needed})")
    for r in judgement.decisions:
        prefix = f"{r.name}: " if len(judgement.decisions) > 1 else ""
        meta[f"{prefix}G"] = dg.MetadataValue.float(plots.for_reading(r.gain))
        meta[f"{prefix}G q05"] = dg.MetadataValue.float(plots.for_reading(r.bootstrap.q05))
        meta[f"{prefix}bootstrap unit"] = r.bootstrap.unit.value
        meta[f"{prefix}count G<=0"] = r.bootstrap.n_gain_le_0
        meta[f"{prefix}beats"] = r.beats
    meta["decisions"] = _decisions_table(judgement)
    meta["report"] = dg.MetadataValue.md(
        verdict_markdown(judgement, jev_label=jev_label, group_column=group_column))
    for r in judgement.decisions:
        prefix = f"{r.name}: " if len(judgement.decisions) > 1 else ""
        meta[f"{prefix}bootstrap of G"] = dg.MetadataValue.md(bootstrap_picture_markdown(r))
    return meta


@dg.asset(
    group_name=GROUP,
    partitions_def=trainings_partitions,
    kinds={"python"},
    description="Four metrics per system and decision, margins, G and the paired bootstrap.",
)
def metrics(
    context: dg.AssetExecutionContext,
    holdout: TrainingHoldout,
    jev_predictions: SystemAnswers,
    model_predictions: SystemAnswers,
) -> dg.MaterializeResult[TrainingMetrics]:
    training = holdout.training
    if training.failed:
        return dg.MaterializeResult(
            value=TrainingMetrics(training, (), model_predictions.system_id, jev_predictions.system_id, {}),
            metadata={"status": "failed training: nothing to measure"},
        )
    reports = []
    for h in holdout.holdouts:
        assert training.dataset is not None
        with product_failure(), run_reads(context):
            data = build_decision_data(
                training.dataset, h, model=model_predictions.predictions, jev=jev_predictions.predictions
            )
            report = judge_decision(data)
        context.log.info(
            "%s: G=%+.4f q05=%+.4f beats=%s", report.name, report.gain, report.bootstrap.q05, report.beats
        )
        reports.append(report)
    meta: dict[str, Any] = {}
    for r in reports:
        meta[f"{r.name}: metrics"] = metrics_table(r, jev_label=jev_predictions.label)
        meta[r.name] = dg.MetadataValue.md(
            decision_summary_markdown(r, jev_label=jev_predictions.label)
        )
        meta[f"{r.name}: picture"] = dg.MetadataValue.md(
            metrics_picture_markdown(r, jev_label=jev_predictions.label)
        )
    split = {h.decision: _split_counts(h) for h in holdout.holdouts}
    value = TrainingMetrics(
        training, tuple(reports), model_predictions.system_id, jev_predictions.system_id, split,
        jev_predictions.label, holdout.trained_on,
    )
    return dg.MaterializeResult(value=value, metadata=meta)


@dg.asset(
    group_name=GROUP,
    partitions_def=trainings_partitions,
    kinds={"python"},
    description="beats / kept / refund / failed: the 2/3-of-decisions rule over every decision.",
)
def verdict(
    context: dg.AssetExecutionContext, metrics: TrainingMetrics
) -> dg.MaterializeResult[TrainingJudgement]:
    manifest = metrics.training.manifest
    if metrics.training.failed:
        judgement = failed_training(
            manifest.failure_reason or "the training failed", keep_if_loses=manifest.options.keep_if_loses
        )
    else:
        judgement = judge_training(metrics.reports, keep_if_loses=manifest.options.keep_if_loses)
    context.log.info("verdict for %s: %s", manifest.training_id, judgement.verdict.value)
    return dg.MaterializeResult(
        value=judgement, metadata=_verdict_metadata(
            judgement, metrics.jev_label, metrics.split, metrics.training.grouping,
            manifest.dataset.columns.group),
    )


@dg.asset(
    group_name=GROUP,
    partitions_def=trainings_partitions,
    kinds={"json"},
    description="The audit file (hashes, answers, both systems' probabilities, every number), "
    "written atomically; once settled, never replaced by other bytes.",
)
def audit(
    context: dg.AssetExecutionContext,
    refund_trainings: RefundTrainingsResource,
    store: StoreResource,
    metrics: TrainingMetrics,
    verdict: TrainingJudgement,
) -> dg.MaterializeResult[str]:
    training_id = _training_id(context)
    document = build_audit(
        verdict,
        training_id=training_id,
        model_id=metrics.model_id,
        jev_id=metrics.jev_id,
        split=metrics.split or None,
        trained_on=metrics.trained_on,
    )
    data = audit_bytes(document)
    digest = hashlib.sha256(data).hexdigest()
    with store.engine() as engine:
        settled = settled_audit_sha256(engine, training_id)
    if settled is not None and settled != digest:
        # A settled training's audit never changes (a manifest edited after the verdict, another
        # option, other predictions): refused before the file is touched, and reported.
        refused = SettledAuditError(training_id, settled, digest)
        context.log.error("%s", refused)
        raise failure(str(refused), {"settled_audit_sha256": settled,
                                     "refused_audit_sha256": digest},
                      error=type(refused).__name__)
    path = write_atomic(refund_trainings.audit_path(training_id), data)
    drop_shared_reads(context.run.run_id)  # the run's last reader is done: its columns go
    context.log.info("audit written to %s (SHA-256 %s)", path, digest)
    return dg.MaterializeResult(
        value=str(path),
        metadata={"path": dg.MetadataValue.path(str(path)), "verdict": verdict.verdict.value,
                  "audit_sha256": digest, "trained_on": metrics.trained_on.describe()},
    )


# ------------------------------------------------------------------------------------------------
# The two conditions, as asset checks on ``verdict``
# ------------------------------------------------------------------------------------------------


def _split_counts(h: Holdout) -> dict[str, int]:
    s = h.summary
    return {
        "n_rows": s.n_rows,
        "n_labeled": s.n_labeled,
        "n_unlabeled": s.n_rows - s.n_labeled,
        "n_test": s.n_test,
        "n_train": s.n_train,
        "n_excluded": s.n_excluded,
        "groups_test": s.groups_test,
        "rows_excluded_from_train": s.rows_excluded_from_train,
        "rows_joined_by_text": s.rows_joined_by_text,
    }


def _decision_lines(judgement: TrainingJudgement, ok: Any) -> str:
    return "; ".join(f"{r.name}: {'yes' if ok(r) else 'no'}" for r in judgement.decisions)


def _verdict_check(
    name: str, description: str
) -> Callable[[Callable[..., dg.AssetCheckResult]], dg.AssetChecksDefinition]:
    """``@dg.asset_check`` on ``verdict``, partitioned like it.

    Without ``partitions_def`` a check on a partitioned asset loads *every* partition's verdict
    (a dict, and a missing file for partitions not yet materialized). Partitioned checks are a
    "preview" feature of Dagster 1.13 (it warns once per definition); we rely on it knowingly
    (docs/operations.md), so that one warning is silenced here and nowhere else.
    """

    def decorate(fn: Callable[..., dg.AssetCheckResult]) -> dg.AssetChecksDefinition:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.PreviewWarning)
            return dg.asset_check(
                asset=verdict, partitions_def=trainings_partitions, name=name, description=description
            )(fn)

    return decorate


def _not_measured(verdict: TrainingJudgement) -> dg.AssetCheckResult:
    """A failed training was not compared with Jev: the check says "not measured", without failing
    (nothing was wrong with a comparison that did not happen; the verdict says ``failed``)."""
    return dg.AssetCheckResult(
        passed=True,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"not measured: the training failed ({verdict.failure_reason})",
        metadata={"measured": False, "verdict": verdict.verdict.value},
    )


@_verdict_check(
    "gain_is_real",
    "The 5th percentile of G over 2,000 paired resamples is above zero (per decision).",
)
def gain_is_real(verdict: TrainingJudgement) -> dg.AssetCheckResult:
    if verdict.failure_reason is not None:
        return _not_measured(verdict)
    meta: dict[str, Any] = {}
    for r in verdict.decisions:
        meta[f"{r.name}: q05"] = dg.MetadataValue.float(plots.for_reading(r.bootstrap.q05))
        meta[f"{r.name}: count G<=0"] = r.bootstrap.n_gain_le_0
    passed = all(r.gain_is_real for r in verdict.decisions)
    return dg.AssetCheckResult(
        passed=passed,
        severity=dg.AssetCheckSeverity.WARN,
        description="the gain is real: " + _decision_lines(verdict, lambda r: r.gain_is_real),
        metadata=meta,
    )


@_verdict_check(
    "nothing_collapses",
    "No metric is worse than Jev's by more than its margin (0.02; 0.05 for worst_class_f1).",
)
def nothing_collapses(verdict: TrainingJudgement) -> dg.AssetCheckResult:
    if verdict.failure_reason is not None:
        return _not_measured(verdict)
    meta: dict[str, Any] = {}
    for r in verdict.decisions:
        broken = [m for m in METRIC_NAMES if r.margins[m] is MarginStatus.BROKEN]
        meta[f"{r.name}: broken margins"] = ", ".join(broken) if broken else "none"
    passed = all(r.nothing_collapses for r in verdict.decisions)
    return dg.AssetCheckResult(
        passed=passed,
        severity=dg.AssetCheckSeverity.WARN,
        description="nothing collapses: " + _decision_lines(verdict, lambda r: r.nothing_collapses),
        metadata=meta,
    )


REFUND_ASSETS = (dataset, holdout, jev_predictions, model_predictions, metrics, verdict, audit)
REFUND_CHECKS = (gain_is_real, nothing_collapses)

# Launched runs (UI, sensor, CLI) run their steps in the run's own process: the chain's steps
# are light (seconds in all), so a subprocess per step (~1.3 s forkserver, ~2.5 s spawn) cost more
# than the work. Runs, not steps, are the unit of parallelism (the queue's limits in
# deploy/dagster*.yaml: one run per training). See docs/operations.md, "Executors".
VERDICT_JOB_EXECUTION: dict[str, Any] = {"execution": {"config": {"in_process": {}}}}

VERDICT_MAX_RUNTIME_S = 6 * 3600
"""A verdict run longer than this is cancelled by run monitoring (docs/lifecycle.md)."""

verdict_job = dg.define_asset_job(
    "verdict_job",
    selection=dg.AssetSelection.groups(GROUP),
    description="Materialize one training's refund chain (one `trainings` partition): its verdict and audit.",
    config=VERDICT_JOB_EXECUTION,
    # A run whose process died (marked failed by run monitoring) is retried from the failure, up
    # to twice; a refused input is not (run_retries.retry_on_asset_or_op_failure: false).
    # A run still going after 6 hours is cancelled by run monitoring (an end, by itself); the
    # training's own deadline (24 h) then returns the credit if no later run settles it.
    tags={"dagster/max_retries": "2", "dagster/retry_strategy": "FROM_FAILURE",
          "dagster/max_runtime": str(VERDICT_MAX_RUNTIME_S)},
    # Its own executor, so a code location with another default (e.g. celery) keeps this one
    # instead of failing to load: the execution block above is this executor's config.
    executor_def=dg.multi_or_in_process_executor,
)


# ------------------------------------------------------------------------------------------------
# Trainings left unsettled (a killed run, a run that keeps failing) are flagged
# ------------------------------------------------------------------------------------------------

_SETTLEMENT = dg.AssetKey("credit_settlement")


def _run_history(instance: dg.DagsterInstance, training_id: str) -> list[RunSummary]:
    records = instance.get_run_records(
        dg.RunsFilter(job_name="verdict_job", tags={"dagster/partition": training_id}), limit=50
    )
    return [RunSummary(r.dagster_run.status.value, r.create_timestamp) for r in records]


@dg.sensor(
    minimum_interval_seconds=600,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=(
        "Flags trainings not settled 2 hours after their first verdict run, with no run queued or "
        "running: an observation on their credit_settlement partition, and the tick names them."
    ),
)
def unsettled_trainings_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
    instance = context.instance
    trainings = instance.get_dynamic_partitions("trainings")
    settled = set(instance.get_materialized_partitions(_SETTLEMENT))
    runs = {t: _run_history(instance, t) for t in trainings if t not in settled}
    flagged = find_unsettled(
        trainings, settled=settled, runs=runs, now=dt.datetime.now(dt.UTC), after=UNSETTLED_AFTER
    )
    if not flagged:
        return dg.SkipReason(f"every training is settled or in progress ({len(trainings)} known)")
    for u in flagged:
        context.log.warning("unsettled: %s", u.describe())
    return dg.SensorResult(
        asset_events=[
            dg.AssetObservation(
                asset_key=_SETTLEMENT,
                partition=u.training_id,
                metadata={
                    "unsettled": u.describe(),
                    "fix": "see the run's failure; re-run verdict_job for this partition once fixed",
                },
            )
            for u in flagged
        ],
    )


def build_defs() -> dg.Definitions:
    """The refund area's assets, checks, job and the unsettled-trainings sensor."""
    return dg.Definitions(
        assets=list(REFUND_ASSETS),
        asset_checks=list(REFUND_CHECKS),
        jobs=[verdict_job],
        sensors=[unsettled_trainings_sensor],
    )
