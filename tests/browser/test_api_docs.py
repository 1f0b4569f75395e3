"""The API docs are a page of the app: its layout and theme, a way back, the strict CSP."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from playwright.sync_api import expect

from zeroshot_web.middleware import CONTENT_SECURITY_POLICY

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_docs_page_lists_every_operation_before_any_script_runs() -> None:
    # given the page as the server sends it (no script has run)
    response = Client().get("/api/v1/docs")
    html = response.content.decode()
    # then it has the strict CSP, no inline script or style, and the operations in words
    assert response["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert "<style" not in html
    assert " style=" not in html
    for script in html.split("<script")[1:]:
        assert 'src="' in script.split(">")[0] or 'type="application/json"' in script
    assert "/api/v1/clusters/{cluster_id}/messages" in html
    assert "Publish one message" in html
    assert 'href="/"' in html  # the way back to the dashboard
    assert "LOADING" not in html.upper().replace("ARE LOADING", "")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_docs_page_is_themed_and_csp_clean_in_the_browser(
    signed_in_page: Any, screenshot: Any, scheme: str
) -> None:
    page = signed_in_page
    page.emulate_media(color_scheme=scheme)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto("/api/v1/docs")
    # Swagger UI has replaced the server's list with its own operations
    expect(page.locator("#swagger-ui .opblock").first).to_be_visible(timeout=15_000)
    expect(page.locator(".api-operations")).to_have_count(0)
    expect(page.locator("header.topbar .brand")).to_be_visible()
    back = page.get_by_role("link", name="← Dashboard")
    expect(back).to_have_attribute("href", "/")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert (background == "rgb(20, 23, 28)") == (scheme == "dark")
    screenshot(page, f"api-docs-{scheme}", full_page=False)
    assert page.console_errors == []
    base = page.url.split("/api/")[0]
    back.click()
    expect(page).to_have_url(base + "/")
