"""What /metrics reports, collected at scrape time (docs/operations.md#metrics).

Counters that events increment (ingest requests, events, latency) are read from Redis
(`core.opsmetrics`); everything else is read from where it is already true — the database (source
health, poll lag, rollbacks and alert deliveries by outcome) and the broker (queue depth per lane) —
so a restarted process never resets or double-counts them.
"""

from __future__ import annotations

import logging

from django.db.models import Count, Sum
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from smrweb.core import opsmetrics
from smrweb.tracking.models import POLLED_SOURCES, Notification, NotificationKind, Project, Rollback

log = logging.getLogger(__name__)

PREFIX = "smrweb"

# (counter name in core.opsmetrics, help, label names) — the names the ingest paths count under.
COUNTERS = (
    ("ingest_requests", "Ingest requests answered, by way in and outcome.", ("via", "outcome")),
    (
        "ingest_events",
        "Events received, by way in and outcome: accepted, duplicate, refused.",
        ("via", "outcome"),
    ),
)
HISTOGRAMS = (("ingest_request_seconds", "Time to answer an ingest request, by way in.", ("via",)),)


class OpsCollector(Collector):
    def collect(self):
        yield from self._counters()
        yield from self._sources()
        yield from self._queues()
        yield from self._rollbacks()
        yield from self._alerts()

    def _counters(self):
        up = GaugeMetricFamily(f"{PREFIX}_counters_up", "1 when the shared counters in Redis could be read.")
        try:
            families = []
            for name, help_text, labels in COUNTERS:
                family = CounterMetricFamily(f"{PREFIX}_{name}", help_text, labels=labels)
                for values, value in opsmetrics.read_counter(name):
                    family.add_metric([values.get(label, "") for label in labels], value)
                families.append(family)
            for name, help_text, labels in HISTOGRAMS:
                family = HistogramMetricFamily(f"{PREFIX}_{name}", help_text, labels=labels)
                for values, buckets, total, _count in opsmetrics.read_histogram(name):
                    family.add_metric([values.get(label, "") for label in labels], buckets, sum_value=total)
                families.append(family)
        except Exception as exc:  # a scrape must still answer with what it can read
            log.warning("/metrics: the shared counters could not be read: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _sources(self):
        now = timezone.now()
        ok = GaugeMetricFamily(
            f"{PREFIX}_source_up", "1 when the last poll of the source worked.", labels=["project", "source"]
        )
        lag = GaugeMetricFamily(
            f"{PREFIX}_poll_lag_seconds",
            "Seconds since the project's source was last read successfully (absent: never).",
            labels=["project", "source"],
        )
        failures = GaugeMetricFamily(
            f"{PREFIX}_source_consecutive_failures", "Failed polls in a row.", labels=["project", "source"]
        )
        projects = Project.objects.filter(source__in=POLLED_SOURCES).select_related("source_health")
        for project in projects.only("slug", "source", "source_health"):
            health = getattr(project, "source_health", None)
            labels = [project.slug, project.source]
            if health is None:
                ok.add_metric(labels, 0)
                continue
            ok.add_metric(labels, 1 if health.ok else 0)
            failures.add_metric(labels, health.consecutive_failures)
            if health.last_success_at:
                lag.add_metric(labels, (now - health.last_success_at).total_seconds())
        yield from (ok, lag, failures)

    def _queues(self):
        from smrweb.celery import LANES, app, lane_queue

        depth = GaugeMetricFamily(
            f"{PREFIX}_celery_queue_depth", "Tasks waiting in each Celery lane's queue.", labels=["queue"]
        )
        up = GaugeMetricFamily(f"{PREFIX}_broker_up", "1 when the Celery broker answered.")
        names = [app.conf.task_default_queue, *(lane_queue(lane) for lane in LANES)]
        try:
            with app.connection_for_read() as connection:
                connection.ensure_connection(max_retries=1)
                channel = connection.default_channel
                for name in names:
                    try:
                        waiting = channel.queue_declare(queue=name, passive=True).message_count
                        depth.add_metric([name], waiting)
                    except Exception:  # a queue nobody declared yet holds nothing
                        depth.add_metric([name], 0)
        except Exception as exc:
            log.warning("/metrics: the broker could not be read: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield depth

    def _rollbacks(self):
        family = CounterMetricFamily(
            f"{PREFIX}_rollbacks", "Rollbacks by outcome so far.", labels=["project", "status"]
        )
        rows = Rollback.objects.values_list("run__project__slug", "status").annotate(n=Count("id")).order_by()
        for slug, status, n in rows:
            family.add_metric([slug, status], n)
        yield family

    def _alerts(self):
        notifications = CounterMetricFamily(
            f"{PREFIX}_alert_notifications",
            "Alert notifications by channel and delivery status (sent, failed, retrying, …).",
            labels=["channel", "status"],
        )
        attempts = CounterMetricFamily(
            f"{PREFIX}_alert_delivery_attempts",
            "Delivery attempts made for alert notifications, by channel.",
            labels=["channel"],
        )
        rows = (
            Notification.objects.filter(kind=NotificationKind.ALERT, rule__isnull=False)
            .values_list("rule__channel", "status")
            .annotate(n=Count("id"), tries=Sum("attempts"))
            .order_by()
        )
        tries_by_channel: dict[str, int] = {}
        for channel, status, n, tries in rows:
            notifications.add_metric([channel, status], n)
            tries_by_channel[channel] = tries_by_channel.get(channel, 0) + (tries or 0)
        for channel, tries in sorted(tries_by_channel.items()):
            attempts.add_metric([channel], tries)
        yield from (notifications, attempts)


def render() -> bytes:
    """The exposition text of one scrape (a fresh registry: nothing in-process is shared between scrapes)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(OpsCollector())
    return generate_latest(registry)
