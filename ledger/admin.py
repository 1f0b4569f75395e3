"""Clusters and messages are browsable and read-only here; deleting a cluster asks first."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from ledger.models import ApiKey, Cluster, Message


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Cluster)
class ClusterAdmin(ReadOnlyAdmin):
    list_display = ("id", "state", "template", "last_sequence", "created_at")
    list_filter = ("state", "template")
    search_fields = ("id",)
    # Deleting stays allowed: Django's delete view lists what goes and asks for confirmation.


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ("cluster", "sequence", "topic", "sender", "receiver", "timestamp")
    list_filter = ("topic",)
    search_fields = ("=cluster__id", "=message_id", "topic", "sender")
    list_select_related = ("cluster",)
    show_full_result_count = False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # messages are never edited; a whole cluster is deleted instead


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "prefix", "cluster", "created_at")
    readonly_fields = ("name", "prefix", "key_hash", "cluster", "created_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # keys are made with `manage.py create_api_key`, which shows them once
