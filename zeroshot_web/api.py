"""The one NinjaAPI: routers of each app, authentication and the error shape."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer, django_auth

from ledger.errors import ServiceError
from ledger.keys import ApiKeyIdentity, api_key_authenticate


class BearerKey(HttpBearer):
    """``Authorization: Bearer <key>`` made by ``create_api_key``."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiKeyIdentity | None:
        return api_key_authenticate(plain=token)


api = NinjaAPI(
    title="zeroshot-web",
    version="1",
    description="The ledger and context engine for clusters of LLM agents.",
    urls_namespace="api",
    auth=[BearerKey(), django_auth],
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
    code = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found"}.get(
        exc.status_code, "error"
    )
    return _error(request, exc.status_code, {"code": code, "message": str(exc)})


api.add_router("/", "ledger.api.router")
api.add_router("/", "snapshots.api.router")
api.add_router("/", "context.api.router")
api.add_router("/", "runs.api.router")
