"""Clusters and messages are browsable and read-only here; deleting a cluster asks first."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from ledger.admin_time import admin_time_column
from ledger.models import ApiKey, Cluster, Message


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Cluster)
class ClusterAdmin(ReadOnlyAdmin):
    created = admin_time_column("created_at", "created at")
    list_display = ("id", "state", "template", "last_sequence", "created")
    list_filter = ("state", "template")
    search_fields = ("id",)
    exclude = ("created_at", "last_timestamp")
    readonly_fields = ("created", "last_activity")
    last_activity = admin_time_column("last_timestamp", "last message at")

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[str], dict[str, int], set[str], list[str]]:
        """Summarise what goes instead of listing every message (a ledger may hold millions).

        Deleting stays an operator action with Django's confirmation page; messages cannot be
        deleted on their own, so their own delete permission is not asked for here.
        """
        clusters = list(objs)
        messages = sum(c.last_sequence for c in clusters)
        summary = [f"cluster {c.id} with its {c.last_sequence:,} messages" for c in clusters]
        return summary, {"clusters": len(clusters), "messages": messages}, set(), []

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: Any) -> HttpResponse:
        """Back to the cluster list after a delete (Django sends read-only admins home)."""
        response = super().response_delete(request, obj_display, obj_id)
        if isinstance(response, HttpResponseRedirect):
            return HttpResponseRedirect(reverse("admin:ledger_cluster_changelist"))
        return response


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    time = admin_time_column("timestamp", "time")
    list_display = ("cluster", "sequence", "topic", "sender", "receiver", "time")
    exclude = ("timestamp",)
    readonly_fields = ("time",)
    list_filter = ("topic",)
    search_fields = ("=cluster__id", "=message_id", "topic", "sender")
    list_select_related = ("cluster",)
    show_full_result_count = False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # messages are never edited; a whole cluster is deleted instead


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    created = admin_time_column("created_at", "created at")
    list_display = ("name", "prefix", "cluster", "created")
    readonly_fields = ("name", "prefix", "key_hash", "cluster", "created")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # keys are made with `manage.py create_api_key`, which shows them once
