"""Alerts: a project's rules, and the evaluation that turns what the write path recorded into
notifications — one per rule, subject and episode.

An *episode* is one stretch of a rule's condition on one subject, named by something that only
changes when the condition starts again: the state change that failed the run, the moment it
stalled, the best score a regression is measured from, the budget level reached, the loop's first
turn. The unique key (rule, subject, episode) is what keeps a replayed batch or a redelivered task
from notifying twice, while a run that recovers and stalls again notifies again.

Evaluation runs on a worker after the write path's commits (`signals.alerts_due`), never in a page
view. Delivery (email, Slack, webhooks) is `outbound/alerts.py`; the inbox channel is delivered here,
by writing the notification.

One module per job (import the module you need; this package re-exports nothing):
  triggers.py    what each trigger means: its parameters, its words, the episodes its condition holds;
  rules.py       a project's rules: create (with the baseline), mute, delete, test; snoozes; mark read;
  evaluation.py  the engine: run, submission and source evaluations, loop findings, the budget guard;
  spend_rule.py  the spend-aware stop's rule and readings (live and over history: the dry run);
  guards.py      the spend guards acting: the spend-aware stop and the day budget, once per episode;
  delivery.py    the bookkeeping of sending: claims, outcomes, the sweep's list, digests.
"""
