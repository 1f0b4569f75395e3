from __future__ import annotations

from django.urls import path

from ledger import views

urlpatterns = [
    path("", views.cluster_list_page, name="clusters"),
    path("clusters/<str:cluster_id>/", views.cluster_page, name="cluster"),
    path(
        "clusters/<str:cluster_id>/messages/<int:sequence>.json",
        views.message_json,
        name="message-json",
    ),
]
