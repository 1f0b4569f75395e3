"""API keys are verified once and trusted briefly; deleting one takes effect in seconds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import override_settings

from ledger.keys import api_key_authenticate, api_key_create
from ledger.models import ApiKey

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("key_cache_on")]


@pytest.fixture
def key_cache_on() -> Iterator[None]:
    with override_settings(API_KEY_CACHE_SECONDS=5.0):
        yield


def test_a_verified_key_is_not_looked_up_again_within_the_cache_period(
    django_assert_num_queries,  # type: ignore[no-untyped-def]
) -> None:
    identity, plain = api_key_create(name="agent")
    with django_assert_num_queries(1):
        assert api_key_authenticate(plain=plain) == identity
    with django_assert_num_queries(0):
        assert api_key_authenticate(plain=plain) == identity


def test_a_wrong_secret_with_a_real_prefix_is_refused_even_after_the_right_one() -> None:
    _, plain = api_key_create(name="agent")
    assert api_key_authenticate(plain=plain) is not None
    assert api_key_authenticate(plain=plain[:-2] + "xx") is None


def test_a_key_deleted_in_this_process_is_refused_at_once() -> None:
    _, plain = api_key_create(name="agent")
    assert api_key_authenticate(plain=plain) is not None
    ApiKey.objects.all().delete()
    assert api_key_authenticate(plain=plain) is None


def test_a_key_deleted_elsewhere_is_refused_once_the_cache_period_is_over() -> None:
    _, plain = api_key_create(name="agent")
    assert api_key_authenticate(plain=plain) is not None
    # as another server process would: straight in the database, no signal here
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {ApiKey._meta.db_table}")
    assert api_key_authenticate(plain=plain) is not None  # trusted for a few seconds
    with override_settings(API_KEY_CACHE_SECONDS=0):
        _, other = api_key_create(name="other")
        assert api_key_authenticate(plain=other) is not None
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {ApiKey._meta.db_table}")
        assert api_key_authenticate(plain=other) is None
