"""The one NinjaAPI: routers of each app, authentication, rate limits and the error shape.

Every answer of the API that is not a success is ``{"code", "message", "details"?}``, 500s
included, and no error body ever carries text from the database: a failure nobody foresaw is
logged with its traceback and answered with a generic message.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser
from ninja.security import APIKeyCookie, HttpBearer
from ninja.types import DictStrAny

from ledger.errors import ServiceError, TooLarge
from ledger.keys import ApiKeyIdentity, api_key_authenticate
from ledger.validation import json_check, json_text_suspicious
from zeroshot_web.docs import AppSwagger
from zeroshot_web.throttling import ApiKeyRateThrottle

logger = logging.getLogger(__name__)

HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    422: "validation_error",
    429: "rate_limited",
}


class BearerKey(HttpBearer):
    """``Authorization: Bearer <key>`` made by ``create_api_key``."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiKeyIdentity | None:
        return api_key_authenticate(plain=token)


class OperatorSession(APIKeyCookie):
    """A signed-in operator's session (the dashboard's own calls), CSRF-checked.

    Ninja's ``django_auth`` checks CSRF before it knows whether there is a session at all, so a
    client without any credentials got 403 "CSRF check failed" instead of 401. Here the CSRF
    check guards only a request that a session actually authenticates.
    """

    param_name = settings.SESSION_COOKIE_NAME

    def _get_key(self, request: HttpRequest) -> str | None:
        if not request.user.is_authenticated:
            return None
        return super()._get_key(request)

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        return request.user if key is not None and request.user.is_authenticated else None


class BoundedJsonParser(Parser):
    """Request bodies as JSON within the ledger's bounds, refused before any schema sees them.

    No NUL and no lone surrogate in any string, key or value; no NaN, Infinity or number too
    large for a double (1e309); at most ``LEDGER_MAX_JSON_DEPTH`` levels. One check for every
    body of every endpoint (``ledger.validation``), so that no database sees what it refuses.
    """

    def parse_body(self, request: HttpRequest) -> DictStrAny:
        try:
            text = request.body.decode("utf-8")
        except UnicodeDecodeError:
            raise ServiceError("the request body is not UTF-8 text") from None
        try:
            value = json.loads(text)
        except RecursionError:
            raise ServiceError("the request body nests too deeply to be read") from None
        except ValueError as error:
            raise ServiceError(f"the request body is not JSON: {error}") from None
        # Strings need a walk only when the text has an escape that could be a NUL or a
        # surrogate; numbers and depth are always checked (cheap: no string is looked at).
        json_check(
            value,
            field="body",
            max_depth=settings.LEDGER_MAX_JSON_DEPTH,
            strings=json_text_suspicious(text),
        )
        return value  # type: ignore[no-any-return]


api = NinjaAPI(
    title="zeroshot-web",
    version="1",
    description="The ledger and context engine for clusters of LLM agents.",
    urls_namespace="api",
    auth=[BearerKey(), OperatorSession()],
    throttle=[ApiKeyRateThrottle()],
    parser=BoundedJsonParser(),
    docs=AppSwagger(),
)


def _error(request: HttpRequest, status: int, body: dict[str, Any]) -> HttpResponse:
    return api.create_response(request, body, status=status)


@api.exception_handler(ServiceError)
def service_error(request: HttpRequest, exc: ServiceError) -> HttpResponse:
    return _error(request, exc.status, exc.to_dict())


@api.exception_handler(ValidationError)
def validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    details = [
        {
            "loc": [part for part in error.get("loc", ()) if part not in ("body", "payload")],
            "message": error.get("msg", ""),
            "type": error.get("type", ""),
        }
        for error in exc.errors
    ]
    first = details[0] if details else {"loc": [], "message": "invalid input"}
    where = ".".join(str(part) for part in first["loc"]) or "request"
    return _error(
        request,
        422,
        {"code": "validation_error", "message": f"{where}: {first['message']}", "details": details},
    )


@api.exception_handler(AuthenticationError)
def authentication_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return _error(
        request,
        401,
        {
            "code": "unauthorized",
            "message": "a valid API key is required (Authorization: Bearer …)",
        },
    )


@api.exception_handler(Http404)
def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return _error(request, 404, {"code": "not_found", "message": str(exc) or "not found"})


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    # Ninja wraps whatever its body parser raises as "Cannot parse request body": answer with
    # what the parser actually found.
    cause = exc.__cause__
    if isinstance(cause, ServiceError):
        return service_error(request, cause)
    code = HTTP_CODES.get(exc.status_code, "error")
    return _error(request, exc.status_code, {"code": code, "message": str(exc)})


@api.exception_handler(RequestDataTooBig)
def body_too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    # Behind a server that does not pass through zeroshot_web.limits (the test client, WSGI).
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return service_error(request, TooLarge(f"the request body is larger than {limit} bytes"))


@api.exception_handler(Exception)
def server_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    # The traceback goes to the log; the body says nothing of it (it may quote the database).
    logger.error("unhandled error on %s %s", request.method, request.path, exc_info=exc)
    return _error(
        request,
        500,
        {"code": "server_error", "message": "the server failed to answer; the error is logged"},
    )


api.add_router("/", "ledger.api.router")
api.add_router("/", "snapshots.api.router")
api.add_router("/", "context.api.router")
api.add_router("/", "runs.api.router")
