from django.urls import path

from smrweb.dashboard.views import (
    alerts,
    annotations,
    audit,
    compare,
    inbox,
    knowledge,
    launches,
    links,
    preferences,
    projects,
    review,
    runs,
    scenarios,
    settings,
    steer,
    submissions,
    tokens,
)

app_name = "dashboard"

urlpatterns = [
    path("", projects.project_list, name="project-list"),
    path("preferences/", preferences.preferences, name="preferences"),
    path("inbox/", inbox.inbox, name="inbox"),
    path("inbox/read", inbox.mark_read, name="inbox-read"),
    path("a/<str:token>/", links.download_by_link, name="artifact-link"),
    path("scenarios/<slug:key>/", scenarios.scenario_detail, name="scenario-detail"),
    path("scenarios/<slug:key>/preflight", scenarios.scenario_preflight, name="scenario-preflight"),
    path(
        "scenarios/<slug:key>/preflight/<str:request_id>",
        scenarios.scenario_preflight_result,
        name="scenario-preflight-result",
    ),
    path("projects/<slug:slug>/", projects.project_detail, name="project-detail"),
    path("projects/<slug:slug>/chart/", projects.project_chart, name="project-chart"),
    path("projects/<slug:slug>/settings/", settings.project_settings, name="project-settings"),
    path("projects/<slug:slug>/members", settings.project_members, name="project-members"),
    path("projects/<slug:slug>/alerts/", alerts.project_alerts, name="project-alerts"),
    path("projects/<slug:slug>/alerts/<int:rule_id>/mute", alerts.mute_alert_rule, name="alert-rule-mute"),
    path(
        "projects/<slug:slug>/alerts/<int:rule_id>/delete", alerts.delete_alert_rule, name="alert-rule-delete"
    ),
    path("projects/<slug:slug>/alerts/<int:rule_id>/test", alerts.test_alert_rule, name="alert-rule-test"),
    path("projects/<slug:slug>/tokens/", tokens.project_tokens, name="project-tokens"),
    path("projects/<slug:slug>/audit/", audit.audit_log, name="project-audit"),
    path("projects/<slug:slug>/audit.csv", audit.audit_log_csv, name="project-audit-csv"),
    path("projects/<slug:slug>/tokens/<int:token_id>/revoke", tokens.revoke_token, name="revoke-token"),
    path("projects/<slug:slug>/knowledge/", knowledge.knowledge_page, name="knowledge"),
    path(
        "projects/<slug:slug>/knowledge/<int:entry_id>/edit", knowledge.knowledge_edit, name="knowledge-edit"
    ),
    path("projects/<slug:slug>/launches/new", launches.launch_new, name="launch-new"),
    path("projects/<slug:slug>/launches/<int:launch_id>/", launches.launch_detail, name="launch-detail"),
    path("projects/<slug:slug>/review/", submissions.review_queue, name="review-queue"),
    path(
        "projects/<slug:slug>/submissions/<int:submission_id>/",
        submissions.submission_detail,
        name="submission-detail",
    ),
    # Before the action route below: its <str:action> would match these names too.
    path(
        "projects/<slug:slug>/submissions/<int:submission_id>/diff",
        review.submission_diff,
        name="submission-diff",
    ),
    path(
        "projects/<slug:slug>/submissions/<int:submission_id>/review-panel",
        review.review_panel,
        name="review-panel",
    ),
    path(
        "projects/<slug:slug>/submissions/<int:submission_id>/queue-review/<str:verdict>",
        review.queue_review,
        name="queue-review",
    ),
    path(
        "projects/<slug:slug>/submissions/<int:submission_id>/comments/",
        annotations.submission_comments,
        name="submission-comments",
    ),
    path(
        "projects/<slug:slug>/submissions/<int:submission_id>/<str:action>",
        submissions.submission_action,
        name="submission-action",
    ),
    path("projects/<slug:slug>/compare/", compare.compare_runs, name="compare-runs"),
    path("projects/<slug:slug>/comments/<int:comment_id>", annotations.comment_action, name="comment-action"),
    path("projects/<slug:slug>/runs/<str:run_id>/", runs.run_detail, name="run-detail"),
    path("projects/<slug:slug>/runs/<str:run_id>/metrics/", runs.run_metric, name="run-metric"),
    path("projects/<slug:slug>/runs/<str:run_id>/turns/", runs.turns_in_bar, name="run-turns"),
    path("projects/<slug:slug>/runs/<str:run_id>/turns/<int:turn_id>/", runs.turn_detail, name="turn-detail"),
    path("projects/<slug:slug>/runs/<str:run_id>/stop", runs.stop_run, name="stop-run"),
    path("projects/<slug:slug>/runs/<str:run_id>/close", runs.close_run, name="close-run"),
    path("projects/<slug:slug>/runs/<str:run_id>/rollback", runs.rollback, name="rollback"),
    path("projects/<slug:slug>/runs/<str:run_id>/steer", steer.steer_run, name="run-steer"),
    path("projects/<slug:slug>/runs/<str:run_id>/steer/status", steer.steer_status, name="run-steer-status"),
    path("projects/<slug:slug>/runs/<str:run_id>/snooze", runs.snooze_run, name="run-snooze"),
    path("projects/<slug:slug>/runs/<str:run_id>/exclusion", runs.run_exclusion, name="run-exclusion"),
    path("projects/<slug:slug>/runs/<str:run_id>/labels", annotations.run_labels, name="run-labels"),
    path("projects/<slug:slug>/runs/<str:run_id>/tags", annotations.run_tags, name="run-tags"),
    path("projects/<slug:slug>/runs/<str:run_id>/note", annotations.run_note, name="run-note"),
    path("projects/<slug:slug>/runs/<str:run_id>/comments/", annotations.run_comments, name="run-comments"),
    path(
        "projects/<slug:slug>/runs/<str:run_id>/artifacts/<int:artifact_id>/download",
        runs.download_artifact,
        name="artifact-download",
    ),
    path(
        "projects/<slug:slug>/runs/<str:run_id>/artifacts/<int:artifact_id>/preview",
        review.artifact_preview,
        name="artifact-preview",
    ),
]
