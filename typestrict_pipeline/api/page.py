"""The result page of a model: plain HTML built from its stored audit (no front-end build).

It shows what the refund page promises: the verdict, the decision that settled it, each
decision's four metrics side by side with Jev (with Δ, the margin and whether it held), G and its
5th percentile, the pictures, a link to the audit file and the command that verifies it. Every
number comes from the audit (the same bytes ``GET /v1/models/{id}/audit`` serves), so the page can
never disagree with what the verifier checks.

>>> page = render_result_page({"decisions": [], "overall": {"verdict": "failed",
...     "failure_reason": "out of memory"}}, model_id="tr_1", files_note="no files")
>>> '<span id="verdict">failed</span>' in page, "out of memory" in page
(True, True)
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from typestrict_pipeline.refund.grouping import resampling_lines_from_audit
from typestrict_pipeline.refund.metrics import GAIN_FORMULA
from typestrict_pipeline.verify_audit import needs_large

METRICS = ("macro_f1", "brier_skill", "selective_acc_80", "worst_class_f1")
MARGINS = {"macro_f1": "0.02", "brier_skill": "0.02", "selective_acc_80": "0.02", "worst_class_f1": "0.05"}


@dataclass(frozen=True)
class Picture:
    """One picture of the page: a title and PNG bytes."""

    title: str
    png: bytes


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(value: Any, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{float(value):+.4f}" if signed else f"{float(value):.4f}"


def decision_rows(decision: Mapping[str, Any]) -> list[dict[str, str]]:
    """One row per metric: model, Jev, Δ, margin, held (strings, as the page shows them).

    >>> rows = decision_rows({"report": {"metrics": {"model": {"macro_f1": 0.8}, "jev": {"macro_f1": 0.7}},
    ...     "deltas": {"macro_f1": 0.1}, "margins": {"macro_f1": "held"}}})
    >>> rows[0]["model"], rows[0]["delta"], rows[0]["held"]
    ('0.8000', '+0.1000', 'held')
    """
    report = decision.get("report", {})
    model = report.get("metrics", {}).get("model", {})
    jev = report.get("metrics", {}).get("jev", {})
    out = []
    for name in METRICS:
        out.append({
            "metric": name, "model": _num(model.get(name)), "jev": _num(jev.get(name)),
            "delta": _num(report.get("deltas", {}).get(name), signed=True),
            "margin": "-" + MARGINS[name],
            "held": str(report.get("margins", {}).get(name, "n/a")).replace("_", " "),
        })
    return out


def _count(value: Any) -> str:
    """A count as the pages write it (``2,000``); ``?`` when the audit has none.

    >>> _count(2000), _count(None)
    ('2,000', '?')
    """
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "?"


def _decision_section(decision: Mapping[str, Any], settling: str | None) -> str:
    report = decision.get("report", {})
    boot = report.get("bootstrap", {})
    name = str(decision.get("name", "?"))
    outcome = "beats Jev" if report.get("beats") else "does not beat Jev"
    mark = ' <span class="settling">(the decision that settled it)</span>' if name == settling else ""
    body = "".join(
        f'<tr data-metric="{_e(r["metric"])}"><th scope="row">{_e(r["metric"])}</th>'
        f'<td class="model">{_e(r["model"])}</td><td class="jev">{_e(r["jev"])}</td>'
        f'<td>{_e(r["delta"])}</td><td>{_e(r["margin"])}</td><td>{_e(r["held"])}</td></tr>'
        for r in decision_rows(decision)
    )
    return (
        f'<section class="decision" data-decision="{_e(name)}"><h2>Decision {_e(name)}: '
        f"model {outcome}{mark}</h2>"
        f"<p>{_e(report.get('n', '?'))} test examples.</p>"
        '<table><thead><tr><th>metric</th><th>model</th><th>Jev</th><th>Δ (model − Jev)</th>'
        f"<th>margin</th><th>held</th></tr></thead><tbody>{body}</tbody></table>"
        f"<p>G = {GAIN_FORMULA} = "
        f'<b class="gain">{_e(_num(report.get("gain"), signed=True))}</b>; 5th percentile over '
        f'{_e(_count(boot.get("resamples")))} paired resamples: <b class="q05">'
        f'{_e(_num(boot.get("q05"), signed=True))}</b>.</p></section>'
    )


def _headline(overall: Mapping[str, Any]) -> str:
    verdict = str(overall.get("verdict", "?"))
    if verdict == "failed":
        return (f"<p>The training failed: {_e(overall.get('failure_reason') or '')}. "
                "The credit comes back.</p>")
    credit = "comes back" if overall.get("refunds_credit") else "stays spent"
    return (
        f"<p>Decisions won: {_e(overall.get('won', 0))} of {_e(overall.get('n_decisions', 0))} "
        f"(needed {_e(overall.get('needed', 0))}). Settling decision: "
        f'<b id="settling">{_e(overall.get("settling_decision"))}</b>. The credit {credit}.</p>'
    )


def _trained_on(audit: Mapping[str, Any]) -> str:
    """What the training attested it was trained on (audit format 3; nothing for older ones)."""
    trained = audit.get("trained_on")
    if not isinstance(trained, Mapping):
        return ""
    if trained.get("status") == "attested":
        return (f'<p id="trained-on">Trained on: {_e(trained.get("n_ids"))} attested ids, all '
                "training rows of the split (set SHA-256 "
                f"<code>{_e(trained.get('ids_sha256'))}</code>).</p>")
    return ('<p id="trained-on">Trained on: not stated (the training did not say which ids the '
            "model was trained on, so nothing was checked).</p>")


_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}"
    "table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:.25rem .5rem;text-align:right}"
    "th[scope=row]{text-align:left}.settling{color:#555;font-weight:normal}"
    "code,pre{background:#f4f4f4;padding:.1rem .3rem}img{max-width:100%}"
)


def render_result_page(
    audit: Mapping[str, Any],
    *,
    model_id: str,
    files_note: str,
    pictures: Sequence[Picture] = (),
    base_url: str = "",
    command_base: str | None = None,
    audit_sha256: str | None = None,
    group_column: str | None = None,
    grouping_warnings: Sequence[str] = (),
) -> str:
    """The whole page as one HTML document (UTF-8, no script, no external resource).

    ``audit_sha256`` is the settled audit's digest (the ledger's): the page publishes it, and its
    verify command checks that the downloaded file is that one (``--expect-sha256``).
    ``base_url`` prefixes the page's link to the audit (``""``: a link relative to the page);
    ``command_base`` prefixes the URLs of its ``curl`` commands (default ``base_url``; a shell
    variable such as ``$TYPESTRICT_API_URL`` when the server does not know its public address).
    """
    overall = audit.get("overall", {})
    settling = overall.get("settling_decision")
    verdict = str(overall.get("verdict", "?"))
    sections = "".join(_decision_section(d, settling) for d in audit.get("decisions", []))
    figures = "".join(
        f'<figure><img alt="{_e(p.title)}" src="data:image/png;base64,'
        f'{base64.b64encode(p.png).decode("ascii")}"><figcaption>{_e(p.title)}</figcaption></figure>'
        for p in pictures
    )
    audit_url = f"{base_url}/v1/models/{model_id}/audit"
    commands = base_url if command_base is None else command_base
    command_audit_url = f"{commands}/v1/models/{model_id}/audit"
    set_base = "" if not commands.startswith("$") else (
        f"<p>Set <code>{_e(commands[1:])}</code> to this server's address first "
        f"(e.g. <code>export {_e(commands[1:])}=https://api.example.com</code>).</p>")
    expect = "" if audit_sha256 is None else f"--expect-sha256 {_e(audit_sha256)} "
    if needs_large(audit):  # else the command fails: "re-run with --large"
        expect = "--large " + expect
    unit = resampling_lines_from_audit(audit, group_column)
    resampling = "" if not unit else f'<p id="resampling">{_e(unit)}</p>'
    resampling += "".join(f'<p class="grouping-warning">Warning: {_e(w)}.</p>' for w in grouping_warnings)
    published = "" if audit_sha256 is None else (
        f'<p>SHA-256 of the settled audit: <code id="audit-sha256">{_e(audit_sha256)}</code> '
        "(the same digest as the ledger's settlement line).</p>")
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>Model {_e(model_id)}: {_e(verdict)}</title><style>{_STYLE}</style></head><body>"
        f'<h1>Model {_e(model_id)}: verdict <span id="verdict">{_e(verdict)}</span></h1>'
        f"{_headline(overall)}{resampling}{_trained_on(audit)}<p>{_e(files_note)}</p>{sections}"
        f'<section id="pictures">{figures}</section>'
        f'<h2>Verify it yourself</h2><p><a id="audit" href="{_e(audit_url)}">Download the audit file</a> '
        "(hashes and probabilities only, no text of yours), then run:</p>"
        f"{published}{set_base}"
        f'<pre id="verify">curl -H "Authorization: Bearer $TYPESTRICT_API_KEY" -o audit.json {_e(command_audit_url)}\n'
        f"curl -O {_e(commands)}/verify_audit.py\npython3 verify_audit.py {expect}audit.json</pre>"
        "</body></html>"
    )
