"""Response headers that every page carries."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import loader

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


class ErrorPageMiddleware:
    """Serves the app's own 404 and 500 pages with ``DEBUG`` on too.

    Without ``DEBUG``, Django renders ``404.html`` and ``500.html`` itself. With it, Django's
    debug pages answer instead, and the Content-Security-Policy blocks their inline styles: an
    operator on ``make run`` would meet an unstyled wall of text. Here they get the same pages
    as in production, with the exception named on the 500 page; the traceback is in the
    server's log. API paths keep their JSON error shape.
    """

    PAGES: ClassVar[dict[int, str]] = {404: "404.html", 500: "500.html"}
    SKIPPED: ClassVar[tuple[str, ...]] = ("/api/", "/static/")

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        template = self.PAGES.get(response.status_code)
        if (
            not settings.DEBUG
            or template is None
            or request.path.startswith(self.SKIPPED)
            or not response.get("Content-Type", "").startswith("text/html")
        ):
            return response
        if response.status_code == 500:
            # No request context: the database may be what failed.
            error = getattr(request, "zeroshot_error", "")
            body = loader.render_to_string(template, {"error": error})
        else:
            body = loader.render_to_string(template, request=request)
        return HttpResponse(body, status=response.status_code)

    def process_exception(self, request: HttpRequest, exception: Exception) -> None:
        request.zeroshot_error = f"{type(exception).__name__}: {exception}"  # type: ignore[attr-defined]
