"""Cluster templates are edited here, checked like every save and kept as versions (SPEC §4).

Recorded context builds are browsable, read-only.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.forms.fields import InvalidJSONInput
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from context.models import ClusterTemplate, ContextBuild
from context.services.templates import (
    template_check,
    template_problems,
    template_save,
    template_version_diff,
    template_versions,
)
from ledger.errors import NotFound
from ledger.interfaces import admin_time, admin_time_column


class TemplateBodyField(forms.JSONField):
    """A JSON field shown indented, so that the textarea can be edited line by line."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, InvalidJSONInput):
            return value
        return json.dumps(value, indent=2, ensure_ascii=False)


class ClusterTemplateForm(forms.ModelForm):  # type: ignore[type-arg]
    body = TemplateBodyField(
        widget=forms.Textarea(
            attrs={"rows": 36, "cols": 120, "class": "template-json", "spellcheck": "false"}
        ),
        help_text="zeroshot's template JSON: {name, description, params, agents}.",
    )
    note = forms.CharField(
        required=False,
        max_length=200,
        help_text="What this change is for; kept with the new version.",
    )

    class Meta:
        model = ClusterTemplate
        fields = ("name", "body")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The editor (static/js/admin-template.js) checks the body here as it is typed.
        self.fields["body"].widget.attrs["data-check-url"] = reverse(
            "admin:context_clustertemplate_check"
        )
        self.fields["body"].widget.attrs["aria-label"] = "Template JSON"

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if "body" in cleaned:
            check = template_check(cleaned["body"])
            for error in check.errors:
                self.add_error("body", str(error.get("message", "")))
            self.warnings = check.warnings
        return cleaned


@admin.register(ClusterTemplate)
class ClusterTemplateAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = ClusterTemplateForm
    updated = admin_time_column("updated_at", "updated at")
    list_display = ("name", "description", "builtin", "agent_count", "updated")
    list_filter = ("builtin",)
    search_fields = ("name", "description")
    fields = ("name", "body", "note", "description", "builtin", "version_history")
    readonly_fields = ("description", "builtin", "version_history")

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {
            "all": ("context/admin/templates.css", "css/inspector.css")
        }
        # The vendored editor (static/vendor/README.md) and what attaches it; no inline script.
        js: ClassVar[tuple[str, ...]] = (
            "vendor/codemirror/zeroshot-editor.js",
            "js/admin-template.js",
            "js/inspector.js",
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # A template is saved by name: renaming would start a new template, so the name stays.
        base = tuple(super().get_readonly_fields(request, obj))
        return ("name", *base) if obj is not None else base

    @admin.display(description="agents")
    def agent_count(self, obj: ClusterTemplate) -> int:
        agents = obj.body.get("agents") if isinstance(obj.body, dict) else None
        return len(agents) if isinstance(agents, list) else 0

    @admin.display(description="versions")
    def version_history(self, obj: ClusterTemplate) -> SafeString | str:
        if obj.pk is None:
            return "-"
        versions = template_versions(name=obj.name)
        current = versions[0].version if versions else None
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    v.version,
                    admin_time(v.created_at),
                    v.note or "-",
                    "current"
                    if v.version == current
                    else format_html(
                        '<a href="{}">diff with current</a>',
                        reverse(
                            "admin:context_clustertemplate_version_diff", args=[obj.pk, v.version]
                        ),
                    ),
                )
                for v in versions
            ),
        )
        return format_html(
            '<table class="template-versions"><thead><tr><th>version</th><th>saved</th>'
            "<th>note</th><th></th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        # Through the service, so that the change is checked again and kept as a version.
        saved = template_save(
            name=obj.name, body=form.cleaned_data["body"], note=form.cleaned_data.get("note", "")
        )
        obj.pk = saved.template.id
        obj.refresh_from_db()
        for warning in saved.warnings:
            self.message_user(request, str(warning.get("message", "")), messages.WARNING)

    def get_urls(self) -> list[URLPattern]:
        diff = path(
            "<int:object_id>/versions/<int:version>/diff/",
            self.admin_site.admin_view(self.version_diff_view),
            name="context_clustertemplate_version_diff",
        )
        check = path(
            "check/",
            self.admin_site.admin_view(self.check_view),
            name="context_clustertemplate_check",
        )
        return [diff, check, *super().get_urls()]

    def check_view(self, request: HttpRequest) -> HttpResponse:
        """The problems of a template body (POSTed as JSON) with where each one is."""
        if request.method != "POST":
            return JsonResponse({"problems": []}, status=405)
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            body = json.loads(request.body)
        except ValueError:
            # The editor marks JSON syntax errors itself, at their place.
            return JsonResponse({"problems": []}, status=400)
        return JsonResponse({"problems": template_problems(body)})

    def version_diff_view(self, request: HttpRequest, object_id: int, version: int) -> HttpResponse:
        """The unified diff from one saved version to the current body."""
        template = self.get_object(request, str(object_id))
        if template is None:
            raise Http404("no such template")
        if not self.has_view_permission(request, template):
            raise PermissionDenied
        try:
            diff = template_version_diff(name=template.name, version=version)
        except NotFound as error:
            raise Http404(error.message) from error
        lines = [(_line_kind(line), line) for line in diff.splitlines()]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": template,
            "title": f"{template.name}: version {version} → current",
            "version": version,
            "lines": lines,
        }
        return TemplateResponse(request, "admin/context/clustertemplate/version_diff.html", context)


def _line_kind(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    return {"+": "add", "-": "del"}.get(line[:1], "same")


@admin.register(ContextBuild)
class ContextBuildAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "cluster_id",
        "agent_id",
        "iteration",
        "trigger_topic",
        "max_tokens",
        "final_tokens",
        "started",
    )
    started = admin_time_column("started_at", "started at")
    exclude = ("started_at",)
    readonly_fields = ("started",)
    search_fields = ("=cluster__id", "agent_id")
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
