"""Fixtures of the runner's tests: a fake work API listening on a free port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.runner.work_api_fake import FakeWorkApi


@pytest.fixture
def work_api() -> Iterator[FakeWorkApi]:
    with FakeWorkApi().running() as fake:
        yield fake
