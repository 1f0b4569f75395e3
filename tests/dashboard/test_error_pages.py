"""The app's own 404 and 500 pages, styled and with a way back, with DEBUG off and on."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import include, path

pytestmark = pytest.mark.django_db


def boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("the ledger caught fire")


# The project's routes plus one view that fails, for the 500 page.
urlpatterns = [path("boom/", boom), path("", include("zeroshot_web.urls"))]


@pytest.fixture
def operator() -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(get_user_model().objects.create_user("op", password="pw-for-tests-1"))
    return client


@pytest.mark.parametrize("debug", [False, True])
def test_an_unknown_address_gets_the_apps_404_page(operator: Client, debug: bool) -> None:
    with override_settings(DEBUG=debug):
        response = operator.get("/clusters/no-such-cluster/")

    html = response.content.decode()
    assert response.status_code == 404
    assert "There is nothing at this address" in html
    assert "/static/css/app.css" in html or "app.css" in html
    assert 'href="/">All clusters</a>' in html
    assert "Sign out" in html  # the page knows the operator
    assert "Content-Security-Policy" in response.headers
    assert "technical" not in html.lower()


def test_anonymous_visitors_get_a_way_to_sign_in(client: Client) -> None:
    with override_settings(DEBUG=True):
        html = client.get("/no/such/page/").content.decode()

    assert "There is nothing at this address" in html
    assert 'href="/accounts/login/?next=/no/such/page/">Sign in</a>' in html


@override_settings(ROOT_URLCONF=__name__)
@pytest.mark.parametrize("debug", [False, True])
def test_a_failing_view_gets_the_apps_500_page(operator: Client, debug: bool) -> None:
    with override_settings(DEBUG=debug):
        response = operator.get("/boom/")

    html = response.content.decode()
    assert response.status_code == 500
    assert "Something broke on our side" in html
    assert 'href="/">All clusters</a>' in html
    assert "Content-Security-Policy" in response.headers
    # the exception is named only with DEBUG on
    assert ("RuntimeError: the ledger caught fire" in html) is debug


@pytest.mark.parametrize("debug", [False, True])
def test_the_api_keeps_its_json_errors(api: Any, debug: bool) -> None:
    with override_settings(DEBUG=debug):
        response = api.get("/api/v1/no-such-thing")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_the_404_page_query_count_is_pinned(
    operator: Client, django_assert_num_queries: Any
) -> None:
    # session, user: the page names the operator and nothing else
    with django_assert_num_queries(2):
        assert operator.get("/no/such/page/").status_code == 404
