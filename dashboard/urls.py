"""The operator pages (mounted at the site root)."""

from __future__ import annotations

from django.urls import path

from dashboard.views import builds, clusters, fleet, runs, templates

app_name = "dashboard"

urlpatterns = [
    path("", clusters.cluster_list_page, name="clusters"),
    path("launch/", runs.cluster_launch, name="cluster-launch"),
    path("clusters/<str:cluster_id>/", clusters.cluster_page, name="cluster"),
    path(
        "clusters/<str:cluster_id>/timeline/missed/",
        clusters.timeline_missed,
        name="timeline-missed",
    ),
    path(
        "clusters/<str:cluster_id>/messages/<int:sequence>.json",
        clusters.message_json,
        name="message-json",
    ),
    path(
        "clusters/<str:cluster_id>/agents/<str:agent_id>/",
        builds.inspector_page,
        name="inspector",
    ),
    path(
        "clusters/<str:cluster_id>/agents/<str:agent_id>/diff/",
        builds.build_diff_page,
        name="build_diff",
    ),
    path("clusters/<str:cluster_id>/metrics/", builds.metrics_page, name="metrics"),
    path("clusters/<str:cluster_id>/tasks/", runs.tasks_page, name="tasks"),
    path("clusters/<str:cluster_id>/agents-panel/", runs.agents_panel, name="agents-panel"),
    path("clusters/<str:cluster_id>/start/", runs.cluster_start, name="cluster-start"),
    path("clusters/<str:cluster_id>/stop/", runs.cluster_stop, name="cluster-stop"),
    path("clusters/<str:cluster_id>/guidance/", runs.cluster_guidance, name="cluster-guidance"),
    path("clusters/<str:cluster_id>/builds/<int:build_id>/", runs.build_page, name="build"),
    path("fleet/", fleet.fleet_page, name="fleet"),
    path("tasks/<str:task_id>/", fleet.task_page, name="task"),
    path("templates/preview/", templates.template_preview, name="template-preview"),
]
