"""The API's one error shape for answers made outside its handlers (middleware)."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, HttpResponseServerError
from django.test import RequestFactory

from zeroshot_web.middleware import ApiErrorShapeMiddleware


def shaped(path: str, answer: HttpResponse) -> HttpResponse:
    def get_response(request: HttpRequest) -> HttpResponse:
        return answer

    return ApiErrorShapeMiddleware(get_response)(RequestFactory().get(path))


def test_a_500_page_under_the_api_becomes_the_error_shape_without_its_text() -> None:
    page = HttpResponseServerError("<h1>Server Error</h1> duplicate key value violates x_pkey")
    page["X-Frame-Options"] = "DENY"

    response = shaped("/api/v1/clusters", page)

    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == {
        "code": "server_error",
        "message": "the server failed to answer; the error is logged",
    }
    assert response["X-Frame-Options"] == "DENY"


def test_pages_outside_the_api_keep_their_own_answer() -> None:
    page = HttpResponseServerError("<h1>Server Error</h1>")

    assert shaped("/clusters/x/", page) is page


def test_json_answers_of_the_api_are_left_as_they_are() -> None:
    answer = HttpResponse('{"code": "conflict", "message": "m"}', status=409)
    answer["Content-Type"] = "application/json"

    assert shaped("/api/v1/clusters", answer) is answer
