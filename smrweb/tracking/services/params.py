"""A run's parameters (MLflow's params), write side: logged by the harness (the project's tokens, or people
with the admin role, as for events), once per key. As in MLflow a logged value is immutable: the same value
again is a no-op (a retry), another value is refused, and a batch with one refused param writes none."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from smrweb.tracking.errors import InvalidInput, NotAllowed
from smrweb.tracking.models import TAG_KEY_RE, ApiToken, AuditVerb, Role, Run, RunParam, clean_text
from smrweb.tracking.services.audit import record_audit

PARAM_KEY_MAX = RunParam._meta.get_field("key").max_length  # 250, MLflow's
PARAM_VALUE_MAX = RunParam._meta.get_field("value").max_length  # 6000, MLflow's
PARAMS_PER_RUN = 1000


def _logger(run: Run, by: Any) -> None:
    project = run.project
    if isinstance(by, ApiToken):
        if by.project_id != project.pk or not by.is_active:
            raise NotAllowed(f"This token cannot log params of {project.slug}'s runs.")
        return
    if not project.allows(by, Role.ADMIN):
        raise NotAllowed(f"Logging params needs the admin role in {project.slug}.")


def check_param(key: Any, value: Any) -> tuple[str, str]:
    """A param's key and value as stored (keys as tag keys: MLflow's names); InvalidInput otherwise."""
    key = clean_text("key", key, limit=PARAM_KEY_MAX, required=True)
    if not TAG_KEY_RE.match(key):
        raise InvalidInput(
            "key",
            f"A param key is 1 to {PARAM_KEY_MAX} letters, digits, spaces and _ - . / :, starting with a "
            f"letter, digit or underscore (not {key[:40]!r}).",
        )
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise InvalidInput("value", f"The value of param {key!r} must be text.")
    if len(value) > PARAM_VALUE_MAX:
        raise InvalidInput(
            "value", f"A param's value is at most {PARAM_VALUE_MAX} characters ({key!r} has {len(value)})."
        )
    if "\x00" in value:
        raise InvalidInput("value", f"The value of param {key!r} holds a NUL character.")
    return key, value


def log_params(run: Run, params: list[tuple[str, str]], *, by: Any) -> int:
    """Log `params` (key, value) on the run, all or none; returns how many were new. A key logged twice in
    `params` with the same value is one param; with two values, or a value other than the one the run
    has, InvalidInput names the key and nothing is written."""
    _logger(run, by)
    wanted: dict[str, str] = {}
    for raw_key, raw_value in params:
        key, value = check_param(raw_key, raw_value)
        if wanted.get(key, value) != value:
            raise InvalidInput("params", f"Param {key!r} is given two values in one request.")
        wanted[key] = value
    if not wanted:
        return 0
    with transaction.atomic():
        Run.objects.select_for_update().filter(pk=run.pk).first()  # one writer of this run's params at a time
        have = dict(RunParam.objects.filter(run=run, key__in=list(wanted)).values_list("key", "value"))
        for key, value in wanted.items():
            if key in have and have[key] != value:
                raise InvalidInput(
                    "params",
                    f"Param {key!r} was already logged with value {have[key][:100]!r}; a logged param "
                    f"cannot change (new value {value[:100]!r}).",
                )
        new = {k: v for k, v in wanted.items() if k not in have}
        if not new:
            return 0
        if RunParam.objects.filter(run=run).count() + len(new) > PARAMS_PER_RUN:
            raise InvalidInput("params", f"A run has at most {PARAMS_PER_RUN} params.")
        RunParam.objects.bulk_create([RunParam(run=run, key=k, value=v) for k, v in new.items()])
        Run.objects.filter(pk=run.pk).update(updated=timezone.now())  # the pages' poll versions
        record_audit(
            by, AuditVerb.RUN_PARAMS_LOGGED, run, project=run.project, keys=sorted(new)[:50], count=len(new)
        )
    return len(new)
