from django.urls import path

from smrweb.api.opsmetrics import counted_ingest
from smrweb.api.views import (
    alerts,
    annotations,
    artifacts,
    bundles,
    compare,
    control,
    events,
    health,
    inbox,
    knowledge,
    launches,
    logs,
    projects,
    rollbacks,
    runs,
    saved_views,
    scenarios,
    submissions,
    tree,
)

app_name = "api"

run = "projects/<slug:slug>/runs/<str:run_id>"
sub = "projects/<slug:slug>/submissions/<int:submission_id>"
rule = "projects/<slug:slug>/alert-rules/<int:rule_id>"
urlpatterns = [
    path("health", health.Health.as_view(), name="health"),
    path("bundle-key", bundles.BundleKey.as_view(), name="bundle-key"),
    path("scenarios/", scenarios.ScenarioList.as_view(), name="scenario-list"),
    path("scenarios/<slug:key>/", scenarios.ScenarioDetail.as_view(), name="scenario-detail"),
    path(
        "scenarios/<slug:key>/leaderboard",
        scenarios.ScenarioLeaderboard.as_view(),
        name="scenario-leaderboard",
    ),
    path("scenarios/<slug:key>/preflight", scenarios.ScenarioPreflight.as_view(), name="scenario-preflight"),
    path(
        "scenarios/<slug:key>/preflight/<str:request_id>",
        scenarios.ScenarioPreflightResult.as_view(),
        name="scenario-preflight-result",
    ),
    path("inbox", inbox.InboxList.as_view(), name="inbox"),
    path("inbox/read", inbox.InboxRead.as_view(), name="inbox-read"),
    path("projects/", projects.ProjectList.as_view(), name="project-list"),
    path("projects/<slug:slug>/", projects.ProjectDetail.as_view(), name="project-detail"),
    path("projects/<slug:slug>/runs", runs.RunList.as_view(), name="run-list"),
    path("projects/<slug:slug>/views", saved_views.SavedViewList.as_view(), name="view-list"),
    path(
        "projects/<slug:slug>/views/<int:view_id>", saved_views.SavedViewDetail.as_view(), name="view-detail"
    ),
    path("projects/<slug:slug>/spend", projects.ProjectSpend.as_view(), name="project-spend"),
    path("projects/<slug:slug>/tree", tree.ProjectTree.as_view(), name="project-tree"),
    path(
        "projects/<slug:slug>/spend-guard", projects.ProjectSpendGuard.as_view(), name="project-spend-guard"
    ),
    path(
        "projects/<slug:slug>/spend-guard/dry-run",
        projects.ProjectSpendGuardDryRun.as_view(),
        name="project-spend-guard-dry-run",
    ),
    path("projects/<slug:slug>/compare/series", compare.CompareSeries.as_view(), name="compare-series"),
    path(
        "projects/<slug:slug>/knowledge/carry-forward", knowledge.CarryForward.as_view(), name="carry-forward"
    ),
    path("projects/<slug:slug>/launches", launches.LaunchList.as_view(), name="launch-list"),
    path(
        "projects/<slug:slug>/launches/<int:launch_id>", launches.LaunchDetail.as_view(), name="launch-detail"
    ),
    path("projects/<slug:slug>/submissions", submissions.SubmissionList.as_view(), name="submission-list"),
    path(
        "projects/<slug:slug>/submissions/bulk", submissions.SubmissionBulk.as_view(), name="submission-bulk"
    ),
    path(f"{sub}", submissions.SubmissionLifecycle.as_view(), name="submission-lifecycle"),
    path(f"{sub}/bundle", bundles.SubmissionBundle.as_view(), name="submission-bundle"),
    path(f"{sub}/diff", submissions.SubmissionDiff.as_view(), name="submission-diff"),
    path(f"{sub}/verify", submissions.SubmissionVerify.as_view(), name="submission-verify"),
    path(f"{sub}/approve", submissions.SubmissionApprove.as_view(), name="submission-approve"),
    path(f"{sub}/reject", submissions.SubmissionReject.as_view(), name="submission-reject"),
    path(f"{sub}/uploaded", submissions.SubmissionUploaded.as_view(), name="submission-uploaded"),
    path(f"{sub}/refused", submissions.SubmissionRefused.as_view(), name="submission-refused"),
    path(f"{sub}/arena-result", submissions.SubmissionArenaResult.as_view(), name="submission-arena-result"),
    path(f"{sub}/comments", annotations.SubmissionComments.as_view(), name="submission-comments"),
    path(
        f"{sub}/comments/<int:comment_id>", annotations.SubmissionComment.as_view(), name="submission-comment"
    ),
    path("projects/<slug:slug>/alert-rules/", alerts.AlertRuleList.as_view(), name="alert-rule-list"),
    path(f"{rule}/", alerts.AlertRuleDetail.as_view(), name="alert-rule-detail"),
    path(f"{rule}/test", alerts.AlertRuleTest.as_view(), name="alert-rule-test"),
    path(f"{rule}/deliveries", alerts.AlertRuleDeliveries.as_view(), name="alert-rule-deliveries"),
    path(f"{run}", runs.RunDetail.as_view(), name="run-detail"),
    path(f"{run}/events", counted_ingest("api")(events.RunEvents.as_view()), name="run-events"),
    path(f"{run}/logs", logs.RunLogs.as_view(), name="run-logs"),
    path(f"{run}/rollback", rollbacks.RunRollback.as_view(), name="run-rollback"),
    path(f"{run}/close", runs.RunClose.as_view(), name="run-close"),
    path(f"{run}/messages", control.RunMessages.as_view(), name="run-messages"),
    path(f"{run}/pause", control.RunPause.as_view(), name="run-pause"),
    path(f"{run}/resume", control.RunResume.as_view(), name="run-resume"),
    path(f"{run}/controls", control.RunControls.as_view(), name="run-controls"),
    path(f"{run}/turns", runs.RunTurns.as_view(), name="run-turns"),
    path(f"{run}/note", annotations.RunNoteView.as_view(), name="run-note"),
    path(f"{run}/tags", annotations.RunTags.as_view(), name="run-tags"),
    path(f"{run}/tags/<path:key>", annotations.RunTagDetail.as_view(), name="run-tag"),
    path(f"{run}/comments", annotations.RunComments.as_view(), name="run-comments"),
    path(f"{run}/comments/<int:comment_id>", annotations.RunComment.as_view(), name="run-comment"),
    path(f"{run}/metrics", runs.RunMetrics.as_view(), name="run-metrics"),
    path(f"{run}/artifacts", artifacts.RunArtifacts.as_view(), name="run-artifacts"),
    path(
        f"{run}/artifacts/<int:artifact_id>/download",
        artifacts.ArtifactDownload.as_view(),
        name="artifact-download",
    ),
]
