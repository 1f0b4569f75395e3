"""Live-server and Playwright fixtures for the browser tests (SQLite run only).

The server is the image's command (``tests.live_server.Server``: uvicorn, as the Dockerfile
runs it) in a subprocess serving ``zeroshot_web.asgi:application`` over the test database: the
same file (SQLite) or the same test database (PostgreSQL) that pytest-django set up, passed in
``DATABASE_URL``. A subprocess rather than a thread because the in-memory channel layer then
lives in the one process that publishes (through the API) and pushes (to the browser), exactly
as in production. Static files
are collected once into a temporary data folder and served by whitenoise with ``DEBUG`` off.

Tests using ``live_url`` need ``pytest.mark.django_db(transaction=True)``: rows a test writes must
be committed for the server to see them.

Fixtures: ``live_url``, ``own_server`` (a server the test may restart), ``browser_page``,
``signed_in_page``, ``screenshot``, ``operator``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from ledger.bus import bus
from tests.conftest import subprocess_database_url
from tests.live_server import Server

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
OPERATOR_USERNAME = "test-operator"
OPERATOR_PASSWORD = "browser-test-pass-41"  # a throwaway test account
_server_logs: list[Path] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On a failure, attach the tail of the live server's log: a 500 explains itself there."""
    report = yield
    if report.failed and _server_logs and _server_logs[0].exists():
        tail = _server_logs[0].read_text(errors="replace").splitlines()[-60:]
        report.sections.append(("live server log (tail)", "\n".join(tail)))
    return report


@pytest.fixture(scope="session")
def _server_env(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, str], Path]:
    """The environment a server process needs, with static files collected once."""
    with django_db_blocker.unblock():
        database_url = subprocess_database_url()
    data_dir = tmp_path_factory.mktemp("live-server")
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "ZEROSHOT_DATA_DIR": str(data_dir),
        "DJANGO_SETTINGS_MODULE": "zeroshot_web.test_settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "collectstatic", "--noinput", "-v", "0"],
        env=env,
        cwd=REPO,
        check=True,
    )
    return env, data_dir


@pytest.fixture(scope="session")
def _live_server(_server_env: tuple[dict[str, str], Path]) -> Iterator[str]:
    """Start the server once per session over the test database; yield its base URL."""
    env, data_dir = _server_env
    log = data_dir / "server.log"
    _server_logs[:] = [log]
    server = Server(env, log)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def own_server(
    _server_env: tuple[dict[str, str], Path], transactional_db: None
) -> Iterator[Server]:
    """A server of this test's own, which the test may stop and start again."""
    env, data_dir = _server_env
    server = Server(env, data_dir / "own-server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def live_url(_live_server: str, transactional_db: None) -> str:
    """Base URL (no trailing slash) of a running ASGI server, websockets included."""
    return _live_server


@pytest.fixture(scope="package")
def _browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio loop on the test thread; Django would then refuse
    # ORM calls made by the test itself. Allowed only while the browser package runs.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    # Live pushes belong to the server process: a test that writes through the services would
    # only push into its own (unused) channel layer, from inside Playwright's event loop.
    bus.push_enabled = False
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        bus.push_enabled = True
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def browser_page(_browser: Any, live_url: str) -> Iterator[Any]:
    """A fresh Playwright page (own cookies) on a 1280x860 viewport; 5 s default timeout.

    ``page.console_errors`` collects console errors and uncaught exceptions (CSP violations
    show up there) so that a test can assert there were none.
    """
    context = _browser.new_context(
        viewport={"width": 1280, "height": 860}, base_url=live_url, locale="en-GB"
    )
    context.set_default_timeout(5000)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.console_errors = errors
    yield page
    context.close()


@pytest.fixture
def operator(transactional_db: None) -> Any:
    """A test operator account (``OPERATOR_USERNAME`` / ``OPERATOR_PASSWORD``)."""
    return get_user_model().objects.create_user(
        OPERATOR_USERNAME, password=OPERATOR_PASSWORD, is_staff=True
    )


@pytest.fixture
def signed_in_page(browser_page: Any, operator: Any, live_url: str) -> Any:
    """``browser_page`` carrying the session cookie of ``operator`` (no trip through the form)."""
    client = Client()
    client.force_login(operator)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    browser_page.context.add_cookies(
        [{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": live_url}]
    )
    return browser_page


@pytest.fixture
def screenshot() -> Callable[..., Path]:
    """``screenshot(page, name)`` saves a full-page PNG to ``test-artifacts/<name>.png``;
    ``full_page=False`` keeps what the viewport shows (sticky elements where they stick)."""

    def take(page: Any, name: str, *, full_page: bool = True) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        # caret="initial": hiding the caret means injecting a <style>, which our CSP refuses
        # (and reports as a console error that tests check for).
        page.screenshot(path=str(path), full_page=full_page, caret="initial")
        return path

    return take
