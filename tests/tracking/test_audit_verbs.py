"""One home for audit verbs (issue 35, review 2026-11-28 §3.5): every verb the services write is an
`AuditVerb`, which the audit page (kinds, words) and the demo console read; a verb that is not listed is
refused rather than written and then shown as "other"."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from smrweb.tracking.models import AuditEvent, AuditVerb, DispatchStatus, RollbackStatus, SubmissionStatus
from smrweb.tracking.queries import audit
from smrweb.tracking.services.audit import record_audit

ROOT = Path(__file__).resolve().parents[2] / "smrweb"


def _names_a_verb(node: ast.expr) -> bool:
    """`AuditVerb.X`, `AuditVerb(<expression>)`, a conditional of those, or a module constant (checked
    where it is bound by the same rule)."""
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name) and node.value.id == "AuditVerb"
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id == "AuditVerb"
    if isinstance(node, ast.IfExp):
        return _names_a_verb(node.body) and _names_a_verb(node.orelse)
    return isinstance(node, ast.Name) and node.id.isupper()


def test_every_audit_call_names_an_audit_verb():
    loose = []
    for path in sorted(ROOT.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        constants = {
            t.id: n.value
            for n in tree.body
            if isinstance(n, ast.Assign)
            for t in n.targets
            if isinstance(t, ast.Name) and t.id.isupper()
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or len(node.args) < 2:
                continue
            if getattr(node.func, "id", getattr(node.func, "attr", None)) != "record_audit":
                continue
            verb = node.args[1]
            if isinstance(verb, ast.Name) and verb.id in constants:
                verb = constants[verb.id]
            if not _names_a_verb(verb) or isinstance(verb, ast.Name):
                loose.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {ast.unparse(node.args[1])}")
        # And every AuditVerb.X named anywhere is one: a typo is found here, not when the call runs.
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "AuditVerb":
                if not hasattr(AuditVerb, node.attr):
                    loose.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} AuditVerb.{node.attr}")
    assert not loose, "record_audit with a verb that is not an AuditVerb:\n" + "\n".join(loose)


@pytest.mark.django_db
def test_a_verb_that_is_not_listed_is_refused_and_nothing_is_written(project):
    with pytest.raises(ValueError):
        record_audit(None, "run.frobbed", project, project=project)
    assert not AuditEvent.objects.filter(verb="run.frobbed").exists()
    row = record_audit(None, AuditVerb.RUN_STALLED, project, project=project)
    assert AuditEvent.objects.get(pk=row.pk).verb == "run.stalled"  # the stored value is the string


def test_every_verb_the_services_build_is_listed():
    built = {
        *(f"submission.{s}" for s in SubmissionStatus.values),
        *(f"control.{s}" for s in DispatchStatus.values),
        *(f"rollback.{s}" for s in RollbackStatus.values),
        *(f"{what}.{how}" for what in ("run", "project") for how in ("archived", "restored")),
        *(f"{what}.{how}" for what in ("run", "submission") for how in ("excluded", "included")),
        *(f"account.password_{how}" for how in ("changed", "reset")),
    }
    assert built <= set(AuditVerb.values), sorted(built - set(AuditVerb.values))


def test_every_verb_falls_into_a_kind_of_the_audit_page_and_says_its_label():
    other = {v.value for v in AuditVerb if audit.kind_of(v).key == audit.OTHER.key}
    # What no kind claims, on purpose: a person's own account, routine uploads and parameters.
    assert other == {
        "account.password_changed",
        "account.password_reset",
        "artifact.stored",
        "run.params_logged",
        "user.created",
        "user.sso_linked",
    }
    assert audit.verb_words(AuditVerb.RUN_STOP_REQUESTED) == "Stop requested"
    assert audit.verb_words("submission.verified") == AuditVerb.SUBMISSION_VERIFIED.label
    assert audit.verb_words("old.thing_done") == "Old thing done"  # an imported archive's verb
