"""The test suite's settings: the production settings, with what a test run must name itself.

Tests run with DEBUG off, like production, so they name a signing key of their own instead of
weakening the rule that a server without one refuses to start. The rate limit is off: the tests
that exercise it turn it on.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-key-never-used-outside-the-test-suite")

from zeroshot_web.settings import *  # noqa: F403

API_RATE_LIMIT = None
# The pipeline runs in the committing thread (tests/conftest.py says so for every test too):
# no worker thread starts when a test module imports the ASGI application. A server or script
# a test starts in a subprocess may ask for another mode.
PIPELINE_MODE = os.environ.get("ZEROSHOT_PIPELINE", "inline")
# A failing pipeline step is retried without the production backoff.
PIPELINE_RETRY_SECONDS = float(os.environ.get("ZEROSHOT_PIPELINE_RETRY_SECONDS", 0.01))
# A test's data lives in its own open transaction, on its own thread's connection: async views
# do their database work on the request's thread, where Django's test client runs it, not on
# the server's long-lived database threads (ledger/threads.py). Servers a test starts in a
# subprocess run as in production.
DATABASE_WORK_ON_REQUEST_THREAD = os.environ.get("ZEROSHOT_DATABASE_ON_REQUEST_THREAD", "1") == "1"
# Keys are looked up on every request, so that the pinned query counts do not depend on which
# request of a test came first; tests/ledger/test_keys.py turns the cache on.
API_KEY_CACHE_SECONDS = 0.0
# Test accounts are made and signed in hundreds of times a run: their passwords are hashed with
# Django's fast test hasher, not production's PBKDF2 (about 0.3 s a hash, by design). Sign-in
# still checks the password; only the cost of guessing one, which no test measures, is lower.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# On PostgreSQL, a test's commits return before their WAL is flushed to disk: what one connection
# commits is seen by every other as soon as the commit returns, as with a flushed commit; only a
# crash of the PostgreSQL server itself could lose the last ones, which no test does. (About
# 3 ms a commit otherwise, and a transactional test commits at every write.)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    DATABASES["default"]["OPTIONS"]["options"] = "-c synchronous_commit=off"  # noqa: F405
