"""Middleware of every request: input that no view may see, headers every page carries, and
the API's one error shape for answers made outside its handlers."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.template import loader

from ledger.validation import text_problem

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
API_PREFIX = "/api/"


def is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


class ContentSecurityPolicyMiddleware:
    """Adds the Content-Security-Policy header unless a view set its own."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response


class UnstorableInputMiddleware:
    """Refuses a path or query string holding a NUL or a lone surrogate (``%00`` decodes to
    one) before any view can hand it to a database: PostgreSQL refuses NUL in any text, so a
    lookup by such an id or filter would fail with a 500 instead of finding nothing."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        found = self._problem(request)
        if found is None:
            return self.get_response(request)
        where, problem = found
        message = f"{where} {problem}"
        if is_api(request):
            return JsonResponse(
                {"code": "validation_error", "message": message, "details": {"field": where}},
                status=422,
            )
        return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")

    @staticmethod
    def _problem(request: HttpRequest) -> tuple[str, str] | None:
        if (problem := text_problem(request.path)) is not None:
            return "the path", problem
        for name, values in request.GET.lists():
            for text in (name, *values):
                if (problem := text_problem(text)) is not None:
                    return f"query parameter {name!r}", problem
        return None


class ApiErrorShapeMiddleware:
    """Gives every API error answered outside the API's handlers the one error shape.

    Routing misses (an unknown path, a method a path does not take) are answered by Django and
    Ninja before any API handler runs, and a failure outside a view by Django's own 500 page, as
    HTML or plain text; agents parse JSON. Only the status and a fixed message are kept: a
    500 page may quote the database.
    """

    MESSAGES: ClassVar[dict[int, tuple[str, str]]] = {
        400: ("bad_request", "the request could not be read"),
        403: ("forbidden", "this request is not allowed"),
        404: ("not_found", "no such API path"),
        405: ("method_not_allowed", "this path does not take that method"),
        413: ("too_large", "the request is too large"),
    }
    SERVER_ERROR = ("server_error", "the server failed to answer; the error is logged")

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        status = response.status_code
        if (
            not is_api(request)
            or status < 400
            or response.get("Content-Type", "").startswith("application/json")
        ):
            return response
        code, message = self.MESSAGES.get(status, ("error", "the request failed"))
        if status >= 500:
            code, message = self.SERVER_ERROR
        if status in (404, 405):
            message = f"{message}: {request.method} {request.path}"
        shaped = JsonResponse({"code": code, "message": message}, status=status)
        for header, value in response.items():
            if header.lower() not in ("content-type", "content-length"):
                shaped[header] = value
        return shaped


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
