"""The interactive API docs as a page of the app: its layout, palette and dark mode, its CSP.

django-ninja's Swagger page is a bare HTML page that stays blank until its 1.4 MB script has
run. Ours extends the dashboard's layout (a way back, the operator's theme) and lists every
operation server-side, so the page says something at once; Swagger UI replaces that list when it
has loaded. Every script and style is a static file: the page keeps the site's strict CSP.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from ninja.openapi.docs import Swagger

if TYPE_CHECKING:
    from ninja import NinjaAPI

METHODS = ("get", "post", "put", "patch", "delete")


def operations(schema: dict[str, Any]) -> list[dict[str, str]]:
    """Each operation of an OpenAPI schema: method, path, summary and tag, in schema order."""
    rows = []
    for path, item in schema.get("paths", {}).items():
        for method in METHODS:
            operation = item.get(method)
            if isinstance(operation, dict):
                tags = operation.get("tags") or [""]
                rows.append(
                    {
                        "method": method.upper(),
                        "path": path,
                        "summary": str(operation.get("summary", "")),
                        "tag": str(tags[0]),
                    }
                )
    return rows


class AppSwagger(Swagger):
    """Swagger UI inside the app's layout (``templates/zeroshot_web/api_docs.html``)."""

    def render_page(self, request: HttpRequest, api: NinjaAPI, **kwargs: Any) -> HttpResponse:
        self.settings["url"] = self.get_openapi_url(api, kwargs)
        schema = api.get_openapi_schema(path_params=kwargs)
        return render(
            request,
            "zeroshot_web/api_docs.html",
            {
                "swagger_settings": json.dumps(self.settings),
                "api": api,
                "openapi_url": self.settings["url"],
                "operations": operations(schema),
            },
        )
