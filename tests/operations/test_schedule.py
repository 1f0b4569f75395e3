"""The daily prune: once a day, whichever process claims the day; the setting turns it on."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.cache import cache
from django.test import override_settings

from operations.policy import RetentionPolicy
from operations.schedule import DAY_MS, RetentionDaily, retention_run_if_due
from tests.live_server import REPO
from tests.operations.retention_data import BASE, cluster_filled, rows_referring_to

pytestmark = pytest.mark.django_db

POLICY = RetentionPolicy.parse(older_than="30d")
TODAY = BASE + 100 * DAY_MS


def test_the_prune_runs_once_a_day(tmp_path: Path) -> None:
    cache.clear()
    cluster_filled("old1", messages=4)
    first = retention_run_if_due(policy=POLICY, now=TODAY, export_dir=tmp_path)
    assert first is not None
    assert [p.cluster_id for p in first] == ["old1"]
    assert (tmp_path / f"old1-{BASE}.json").exists()
    # later the same day, nothing runs, even with a cluster to prune
    cluster_filled("old2", messages=4)
    assert retention_run_if_due(policy=POLICY, now=TODAY + 3_600_000, export_dir=None) is None
    assert rows_referring_to("old2")["ledger_message"] == 4
    # the next day it does
    second = retention_run_if_due(policy=POLICY, now=TODAY + DAY_MS, export_dir=None)
    assert second is not None
    assert [p.cluster_id for p in second] == ["old2"]


@pytest.mark.django_db(transaction=True)
def test_the_thread_starts_only_when_the_setting_asks() -> None:
    cache.clear()
    with override_settings(OPERATIONS_RETENTION=None):
        assert RetentionDaily().start() is False
    cluster_filled("old1", messages=4)
    daily = RetentionDaily()
    with override_settings(OPERATIONS_RETENTION=POLICY):
        assert daily.start() is True
        try:
            # its first check prunes at once
            for _ in range(100):
                if not rows_referring_to("old1")["ledger_cluster"]:
                    break
                time.sleep(0.1)
        finally:
            daily.stop()
    assert set(rows_referring_to("old1").values()) == {0}


def _settings_in_a_process(**env: str) -> subprocess.CompletedProcess[str]:
    code = "from django.conf import settings; print(settings.OPERATIONS_RETENTION)"
    return subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        cwd=REPO,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "zeroshot_web.test_settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_settings_read_the_policy_from_the_environment() -> None:
    on = _settings_in_a_process(
        ZEROSHOT_RETENTION_OLDER_THAN="30d", ZEROSHOT_RETENTION_STATES="failed"
    )
    assert on.stdout.strip() == ("RetentionPolicy(older_than_ms=2592000000, states=('failed',))"), (
        on.stderr
    )
    bad = _settings_in_a_process(ZEROSHOT_RETENTION_OLDER_THAN="a month")
    assert bad.returncode != 0
    assert "ZEROSHOT_RETENTION_*: an age is a whole number" in bad.stderr
