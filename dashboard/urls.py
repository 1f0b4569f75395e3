"""The operator pages (mounted at the site root)."""

from __future__ import annotations

from django.urls import path

from dashboard.views import builds, clusters, templates

app_name = "dashboard"

urlpatterns = [
    path("", clusters.cluster_list_page, name="clusters"),
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
    path("templates/preview/", templates.template_preview, name="template-preview"),
]
