"""Alert rules over the API: a project's rules (list, create), one rule (read, mute, delete), a test
send, and the rule's delivery log.

Reading is for whoever reaches the project (its viewers, its tokens); making, muting, deleting and
test-sending rules is for people with the admin role (`access.project_for_person`): a rule sends the
project's news to an address outside it, which a harness's token has no business choosing. The
webhook's signing secret is answered on create, and to admins reading the one rule."""

from __future__ import annotations

from functools import cached_property

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb import tasks
from smrweb.api import examples
from smrweb.api.access import actor_of, alert_rule_for, is_admin, project_for, project_for_person
from smrweb.api.errors import rate_limited
from smrweb.api.schema import ERROR, ERRORS, UNSUPPORTED_MEDIA_TYPE
from smrweb.api.serializers.alerts import (
    AlertRuleIn,
    AlertRuleSerializer,
    AlertRuleUpdate,
    DeliverySerializer,
)
from smrweb.core import queue, ratelimits
from smrweb.tracking import services
from smrweb.tracking.models import AlertRule, Channel, Notification, Role

MANAGE = "manage alert rules"


def _rule_answer(request, rule: AlertRule, *, secret: bool = False) -> dict:
    admin = is_admin(request, rule.project)
    return AlertRuleSerializer(rule, context={"admin": admin, "secret": secret and admin}).data


@extend_schema_view(
    get=extend_schema(
        operation_id="alert_rule_list",
        summary="A project's alert rules",
        responses={200: AlertRuleSerializer(many=True), **ERRORS},
    )
)
class AlertRuleList(generics.ListAPIView):
    """A project's alert rules, by trigger."""

    serializer_class = AlertRuleSerializer
    queryset = AlertRule.objects.none()  # the model, for the schema; get_queryset scopes it

    @cached_property
    def project(self):
        return project_for(self.request, self.kwargs["slug"])

    def get_queryset(self):
        return AlertRule.objects.filter(project=self.project).select_related(
            "project", "recipient", "created_by"
        )

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "admin": is_admin(self.request, self.project)}

    @extend_schema(
        operation_id="alert_rule_create",
        summary="Create an alert rule (admins)",
        request=AlertRuleIn,
        examples=[examples.ALERT_RULE, examples.ALERT_RULE_WEBHOOK, examples.ALERT_RULE_DIGEST],
        responses={201: AlertRuleSerializer, **ERRORS, **UNSUPPORTED_MEDIA_TYPE},
        description="What the rule's condition already holds for when it is made is logged as suppressed: "
        "a rule speaks of what happens after it. A webhook rule's answer carries its signing `secret`.",
    )
    def post(self, request, slug: str):
        project = project_for_person(request, slug, role=Role.ADMIN, doing=MANAGE)  # before field errors
        form = AlertRuleIn(data=request.data)
        form.is_valid(raise_exception=True)
        rule = services.create_alert_rule(project, by=actor_of(request), **form.validated_data)
        return Response(_rule_answer(request, rule, secret=True), status=status.HTTP_201_CREATED)


class AlertRuleDetail(APIView):
    @extend_schema(
        operation_id="alert_rule_read",
        summary="One alert rule (its webhook secret to admins)",
        responses={200: AlertRuleSerializer, **ERRORS},
    )
    def get(self, request, slug: str, rule_id: int):
        rule = alert_rule_for(project_for(request, slug), rule_id)
        return Response(_rule_answer(request, rule, secret=True))

    @extend_schema(
        operation_id="alert_rule_mute",
        summary="Mute or unmute an alert rule (admins)",
        request=AlertRuleUpdate,
        examples=[examples.ALERT_RULE_MUTE],
        responses={200: AlertRuleSerializer, **ERRORS, **UNSUPPORTED_MEDIA_TYPE},
    )
    def patch(self, request, slug: str, rule_id: int):
        rule = alert_rule_for(project_for_person(request, slug, role=Role.ADMIN, doing=MANAGE), rule_id)
        form = AlertRuleUpdate(data=request.data)
        form.is_valid(raise_exception=True)
        services.update_alert_rule(rule, by=actor_of(request), muted=form.validated_data["muted"])
        return Response(_rule_answer(request, alert_rule_for(rule.project, rule.pk)))  # as stored now

    @extend_schema(
        operation_id="alert_rule_delete",
        summary="Delete an alert rule and its delivery log (admins)",
        responses={204: OpenApiResponse(description="Deleted."), **ERRORS},
    )
    def delete(self, request, slug: str, rule_id: int):
        rule = alert_rule_for(project_for_person(request, slug, role=Role.ADMIN, doing=MANAGE), rule_id)
        services.delete_alert_rule(rule, by=actor_of(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


TOO_MANY = OpenApiResponse(ERROR, description="Too many test sends (SMRWEB_ALERT_TEST_RATE).")


class AlertRuleTest(APIView):
    @extend_schema(
        operation_id="alert_rule_test",
        summary="Send a test notification through the rule's channel (admins)",
        request=None,
        responses={202: DeliverySerializer, **ERRORS, 429: TOO_MANY},
        description="At most `SMRWEB_ALERT_TEST_RATE` tests (default 10 an hour) per person and per rule; "
        "past it, 429 with Retry-After. "
        "The test is a delivery like any other: email, Slack and webhooks are sent by a worker "
        "(follow it in the delivery log), the inbox gets it at once (`status: sent`). A muted rule still "
        "sends its tests.",
    )
    def post(self, request, slug: str, rule_id: int):
        project = project_for_person(request, slug, role=Role.ADMIN, doing="send test alerts")
        rule = alert_rule_for(project, rule_id)
        if limited := ratelimits.alert_test(request):
            return rate_limited(limited)
        notification = services.send_test(rule, by=actor_of(request))
        if rule.channel != Channel.INBOX:
            queue.dispatch(tasks.deliver_notification, notification.pk)  # else redispatch_stale_actions
        return Response(DeliverySerializer(notification).data, status=status.HTTP_202_ACCEPTED)


@extend_schema_view(
    get=extend_schema(
        operation_id="alert_rule_deliveries",
        summary="An alert rule's delivery log, newest first",
        responses={200: DeliverySerializer(many=True), **ERRORS},
    )
)
class AlertRuleDeliveries(generics.ListAPIView):
    """Every notification of the rule: sent, retrying (with the error and the next attempt), failed (with
    the error), or suppressed (muted, snoozed, or older than the rule)."""

    serializer_class = DeliverySerializer
    queryset = Notification.objects.none()  # the model, for the schema; get_queryset scopes it

    def get_queryset(self):
        rule = alert_rule_for(project_for(self.request, self.kwargs["slug"]), self.kwargs["rule_id"])
        return Notification.objects.filter(rule=rule).order_by("-created", "-id")
