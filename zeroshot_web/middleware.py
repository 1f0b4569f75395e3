"""Response headers that every page carries."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from django.http import HttpRequest, HttpResponse, JsonResponse

# No inline scripts or styles anywhere: agent text is untrusted, so the browser must refuse to
# run anything that did not come from our own static files.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self' ws: wss:",
        "object-src 'none'",
        "base-uri 'self'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ]
)


class ContentSecurityPolicyMiddleware:
    """Adds the Content-Security-Policy header unless a view set its own."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.path.startswith("/api/v1/docs"):
            # The interactive API docs load their own scripts; they show no agent text.
            return response
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response


class ApiErrorShapeMiddleware:
    """Gives the API's own 404 and 405 answers the one error shape of every other 4xx.

    Routing misses (an unknown path, a method a path does not take) are answered by Django and
    Ninja before any API handler runs, as HTML or plain text; agents parse JSON.
    """

    CODES: ClassVar[dict[int, tuple[str, str]]] = {
        404: ("not_found", "no such API path"),
        405: ("method_not_allowed", "this path does not take that method"),
    }

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            request.path.startswith("/api/")
            and response.status_code in self.CODES
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            code, message = self.CODES[response.status_code]
            detail = f"{message}: {request.method} {request.path}"
            shaped = JsonResponse({"code": code, "message": detail}, status=response.status_code)
            if response.has_header("Allow"):
                shaped["Allow"] = response["Allow"]
            return shaped
        return response
