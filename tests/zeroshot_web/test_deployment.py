"""Production settings: no server without a secret key, and a clean `check --deploy`."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SWITCHES = {
    "DJANGO_SECURE_COOKIES": "1",
    "DJANGO_SECURE_SSL_REDIRECT": "1",
    "DJANGO_SECURE_HSTS_SECONDS": "31536000",
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "DJANGO_SECURE_HSTS_PRELOAD": "1",
    "DJANGO_BEHIND_PROXY": "1",
}


def manage(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``manage.py`` with the production settings and only the environment given here."""
    base = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "ZEROSHOT_", "API_", "LEDGER_"))
        and key not in {"DATABASE_URL", "REDIS_URL"}
    }
    full_env = {
        **base,
        "DJANGO_SETTINGS_MODULE": "zeroshot_web.settings",
        "ZEROSHOT_DATA_DIR": str(tmp_path),
        **env,
    }
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=full_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_without_debug_and_without_a_secret_key_the_server_refuses_to_start(
    tmp_path: Path,
) -> None:
    result = manage(tmp_path, "check", DJANGO_DEBUG="0")

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in result.stderr


def test_with_debug_on_a_development_key_is_used(tmp_path: Path) -> None:
    result = manage(tmp_path, "check", DJANGO_DEBUG="1")

    assert result.returncode == 0, result.stderr


def test_check_deploy_is_clean_with_the_production_switches_on(tmp_path: Path) -> None:
    key = secrets.token_urlsafe(50)

    result = manage(
        tmp_path, "check", "--deploy", "--fail-level", "WARNING", DJANGO_SECRET_KEY=key, **SWITCHES
    )

    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_names_what_is_missing_without_the_switches(tmp_path: Path) -> None:
    result = manage(tmp_path, "check", "--deploy", DJANGO_SECRET_KEY=secrets.token_urlsafe(50))

    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr


@pytest.mark.parametrize("value", ["soon", "1.5"])
def test_a_number_setting_that_is_not_a_number_is_named(tmp_path: Path, value: str) -> None:
    result = manage(tmp_path, "check", DJANGO_DEBUG="1", DJANGO_SECURE_HSTS_SECONDS=value)

    assert result.returncode != 0
    assert "DJANGO_SECURE_HSTS_SECONDS must be a whole number" in result.stderr
