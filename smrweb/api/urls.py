from django.urls import path

from smrweb.api import knowledge_views, scenario_views, submission_views, views

app_name = "api"

run = "projects/<slug:slug>/runs/<str:run_id>"
sub = "projects/<slug:slug>/submissions/<int:submission_id>"
urlpatterns = [
    path("health", views.Health.as_view(), name="health"),
    path("scenarios/", views.ScenarioList.as_view(), name="scenario-list"),
    path("scenarios/<slug:key>/", views.ScenarioDetail.as_view(), name="scenario-detail"),
    path("scenarios/<slug:key>/preflight", scenario_views.ScenarioPreflight.as_view(), name="scenario-preflight"),
    path("scenarios/<slug:key>/preflight/<str:request_id>", scenario_views.ScenarioPreflightResult.as_view(),
         name="scenario-preflight-result"),
    path("projects/", views.ProjectList.as_view(), name="project-list"),
    path("projects/<slug:slug>/", views.ProjectDetail.as_view(), name="project-detail"),
    path("projects/<slug:slug>/runs", views.RunList.as_view(), name="run-list"),
    path("projects/<slug:slug>/knowledge/carry-forward", knowledge_views.CarryForward.as_view(), name="carry-forward"),
    path("projects/<slug:slug>/submissions", views.SubmissionList.as_view(), name="submission-list"),
    path(f"{sub}", submission_views.SubmissionLifecycle.as_view(), name="submission-lifecycle"),
    path(f"{sub}/verify", submission_views.SubmissionVerify.as_view(), name="submission-verify"),
    path(f"{sub}/approve", submission_views.SubmissionApprove.as_view(), name="submission-approve"),
    path(f"{sub}/reject", submission_views.SubmissionReject.as_view(), name="submission-reject"),
    path(f"{sub}/uploaded", submission_views.SubmissionUploaded.as_view(), name="submission-uploaded"),
    path(f"{sub}/arena-result", submission_views.SubmissionArenaResult.as_view(), name="submission-arena-result"),
    path(f"{run}", views.RunDetail.as_view(), name="run-detail"),
    path(f"{run}/events", views.RunEvents.as_view(), name="run-events"),
    path(f"{run}/rollback", submission_views.RunRollback.as_view(), name="run-rollback"),
    path(f"{run}/turns", views.RunTurns.as_view(), name="run-turns"),
    path(f"{run}/metrics", views.RunMetrics.as_view(), name="run-metrics"),
    path(f"{run}/artifacts", views.RunArtifacts.as_view(), name="run-artifacts"),
    path(f"{run}/artifacts/<int:artifact_id>/download", views.ArtifactDownload.as_view(), name="artifact-download"),
]
