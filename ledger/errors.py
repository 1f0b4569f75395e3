"""The one error hierarchy: every failure a client can cause has a stable code and an HTTP status.

Services raise these; the API maps them to ``{"code", "message", "details"}`` in one handler
(``zeroshot_web.api``), and commands print the message.
"""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """A failure caused by the caller's input or by the state of the data."""

    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, details: Any = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        if code is not None:
            self.code = code

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            body["details"] = self.details
        return body


class InvalidInput(ServiceError):
    status = 422
    code = "validation_error"


class NotFound(ServiceError):
    status = 404
    code = "not_found"


class Conflict(ServiceError):
    status = 409
    code = "conflict"


class TooLarge(ServiceError):
    status = 413
    code = "too_large"


class Forbidden(ServiceError):
    status = 403
    code = "forbidden"
