"""Settings, read from the environment (SPEC §6.6). One file: the project is small."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from operations.policy import PolicyError, RetentionPolicy

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("ZEROSHOT_DATA_DIR", BASE_DIR / "data"))


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, got {value!r}") from None


DEBUG = env_bool("DJANGO_DEBUG", default=False)


def _secret_key() -> str:
    """The signing key: from the environment, or a fixed development key only with DEBUG on.

    A server that signed sessions with a key published in the repository would let anyone forge
    them, so without DEBUG it refuses to start. The test suite names its own key
    (``zeroshot_web.test_settings``).
    """
    key = os.environ.get("DJANGO_SECRET_KEY", "").strip()
    if key:
        return key
    if DEBUG:
        return "dev-only-insecure-key-zeroshot-web"
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY is not set. Set it to a long random value (for example the output "
        "of `python -c 'import secrets; print(secrets.token_urlsafe(50))'`), or set "
        "DJANGO_DEBUG=1 for a local development server."
    )


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")
    if h.strip()
]
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()
]

# Deployment switches, all off by default so that a plain-HTTP local run keeps working;
# `manage.py check --deploy` is clean with them on (docs/operators-guide.md).
# Cookies only over HTTPS: the session and the CSRF cookie.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES")
# Redirect plain HTTP to HTTPS.
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT")
# HTTP Strict Transport Security: seconds browsers remember to use HTTPS only (0 = off).
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS")
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD")
# Behind a TLS-terminating proxy that sets X-Forwarded-Proto (and X-Forwarded-Host): trust them.
# Only when every request really comes through that proxy, or clients could claim HTTPS.
if env_bool("DJANGO_BEHIND_PROXY"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    USE_X_FORWARDED_HOST = True

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "django_htmx",
    "template_partials",
    "ninja",
    "ledger",
    "snapshots",
    "context",
    "runs",
    "dashboard",
    "operations",
]

MIDDLEWARE = [
    # Outermost, so that it shapes the API's errors from every layer below, 500s included.
    "zeroshot_web.middleware.ApiErrorShapeMiddleware",
    "zeroshot_web.middleware.UnstorableInputMiddleware",
    # Times the publish requests for /metrics (operations/metrics.py).
    "operations.metrics.PublishTimer",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "zeroshot_web.middleware.ContentSecurityPolicyMiddleware",
    "zeroshot_web.middleware.ErrorPageMiddleware",
]

ROOT_URLCONF = "zeroshot_web.urls"
ASGI_APPLICATION = "zeroshot_web.asgi.application"

TEMPLATES: list[dict[str, Any]] = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            # ``{% url %}`` with its answers kept (docs/decisions/0251).
            "builtins": ["dashboard.templatetags.kept_links"],
        },
    },
]


# psycopg prepares a statement run this many times on a connection: never, in effect.
PREPARE_ONLY_WHEN_ASKED = 2**31 - 1


def _database() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL")
    if url:
        config: dict[str, Any] = dict(dj_database_url.parse(url, conn_max_age=0))
    else:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        config = {"ENGINE": "django.db.backends.sqlite3", "NAME": DATA_DIR / "zeroshot.sqlite3"}
    if config["ENGINE"] == "django.db.backends.postgresql":
        # Django's native psycopg pool: a request's thread borrows a connection and gives it
        # back when the request ends, instead of connecting (a few ms) each time.
        config["OPTIONS"] = {
            "pool": {
                "min_size": env_int("DATABASE_POOL_MIN", 2),
                "max_size": env_int("DATABASE_POOL_MAX", 20),
                "timeout": 10,
            },
            # The prebuilt statements whose plan cannot depend on their values are prepared on
            # each connection at their first run (``ledger.statements.WriteCursor.execute``
            # asks psycopg to); no statement is prepared for being repeated, which this count
            # is out of reach for (docs/decisions/0309). None prepares nothing
            # (DATABASE_PREPARED_STATEMENTS=off): for a pooler in transaction mode.
            "prepare_threshold": (
                PREPARE_ONLY_WHEN_ASKED if env_bool("DATABASE_PREPARED_STATEMENTS", True) else None
            ),
        }
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # Django's, with this process's write transactions taking turns (docs/decisions/0314).
        config["ENGINE"] = "ledger.sqlite_backend"
        # Connections live as long as their thread: the publish endpoints' database threads
        # keep theirs (ledger/threads.py), and so do the threads requests borrow
        # (zeroshot_web/handler.py).
        config["CONN_MAX_AGE"] = None
        # STYLE.md rule 9: writers queue behind one lock instead of failing with "locked".
        config["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            # A server checkpoints the WAL off the committing threads, shortly after commits
            # (``ledger.pipeline``'s upkeep, docs/decisions/0314); a commit checkpoints itself
            # only past 10,000 pages (40 MB), which a process without that thread may reach.
            "init_command": (
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                "PRAGMA wal_autocheckpoint=10000;"
            ),
        }
        # A file, not memory, so that the test suite runs with WAL like production; one per
        # process so that two test runs never share it.
        config.setdefault("TEST", {})
        config["TEST"].setdefault("NAME", str(DATA_DIR / f"test-{os.getpid()}.sqlite3"))
    return config


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "")


def redis_channel_layer(url: str) -> dict[str, Any]:
    """The Redis channel layer, with a socket timeout above its blocking reads.

    channels_redis's layer with group sends in one round trip (ledger/channel_layer.py).

    channels_redis waits for messages with BZPOPMIN of up to 5 s (``brpop_timeout``), and
    redis-py 6+ gives every socket a 5 s read timeout by default: an idle consumer's read then
    times out just as the server answers, and the socket is closed with 1011 (channels_redis
    issue #422). A read timeout well above the blocking time keeps idle sockets open, while a
    Redis that really stops answering is still noticed; keepalive finds dead peers.
    """
    return {
        "BACKEND": "ledger.channel_layer.OneTripRedisChannelLayer",
        "CONFIG": {
            "hosts": [
                {
                    "address": url,
                    "socket_timeout": 30,
                    "socket_connect_timeout": 5,
                    "socket_keepalive": True,
                    "health_check_interval": 15,
                }
            ]
        },
    }


CHANNEL_LAYERS: dict[str, Any] = {
    "default": (
        redis_channel_layer(REDIS_URL)
        if REDIS_URL
        else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    )
}
# The API's rate limits count in the cache: in Redis when there is one, so that several server
# processes share one count per key; else in each process's memory.
CACHES: dict[str, Any] = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# collectstatic's target; the container image collects into its own folder at build time, away
# from the data volume (Dockerfile).
STATIC_ROOT = Path(os.environ.get("ZEROSHOT_STATIC_ROOT", "").strip() or DATA_DIR / "staticfiles")
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns on every request otherwise
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"bare": {"format": "%(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler"},
        # SPEC §6.2: with ZEROSHOT_CONTEXT_METRICS=1, one "[ContextMetrics] {json}" line per
        # build on stdout, and nothing else on that stream.
        "metrics": {"class": "zeroshot_web.logging.StdoutHandler", "formatter": "bare"},
    },
    "loggers": {
        "zeroshot.context_metrics": {"handlers": ["metrics"], "level": "INFO", "propagate": False}
    },
    "root": {"handlers": ["console"], "level": os.environ.get("DJANGO_LOG_LEVEL", "WARNING")},
}

# Ledger limits (SPEC §1.1): each is a setting so that an operator can move it.
LEDGER_MAX_TEXT_BYTES = env_int("LEDGER_MAX_TEXT_BYTES", 1024 * 1024)
LEDGER_MAX_JSON_BYTES = env_int("LEDGER_MAX_JSON_BYTES", 1024 * 1024)
LEDGER_MAX_BATCH = env_int("LEDGER_MAX_BATCH", 1000)
# How far ahead of the server's clock a timestamp may be (a publisher's or an import's): a
# far-future timestamp would become the cluster's clock for every later message.
LEDGER_MAX_CLOCK_SKEW_MS = env_int("LEDGER_MAX_CLOCK_SKEW_MS", 5 * 60 * 1000)
# How deep JSON may nest, in request bodies and in stored content, data and metadata.
LEDGER_MAX_JSON_DEPTH = env_int("LEDGER_MAX_JSON_DEPTH", 64)

# Context engine (SPEC §3.4, §6.2).
CONTEXT_MAX_CHARS = int(os.environ.get("ZEROSHOT_CONTEXT_MAX_CHARS", 500_000))
CONTEXT_METRICS_STDOUT = env_bool("ZEROSHOT_CONTEXT_METRICS")
CONTEXT_METRICS_LEDGER = env_bool("ZEROSHOT_CONTEXT_METRICS_LEDGER")

# The post-commit pipeline (ledger/pipeline.py): "thread" runs it in a worker thread of each
# server process; "inline" in the committing thread (tests); "off" never in this process.
PIPELINE_MODE = os.environ.get("ZEROSHOT_PIPELINE", "thread")
PIPELINE_SWEEP_SECONDS = float(os.environ.get("ZEROSHOT_PIPELINE_SWEEP_SECONDS", 2.0))
# Its fair scheduler: worker threads per process (a cluster is on one at a time), and the most
# messages one turn of a cluster offers before the next cluster's turn.
PIPELINE_WORKERS = env_int("ZEROSHOT_PIPELINE_WORKERS", 4)
PIPELINE_TURN_MESSAGES = env_int("ZEROSHOT_PIPELINE_TURN_MESSAGES", 50)
# A failing step is retried after PIPELINE_RETRY_SECONDS, doubled per attempt; after
# PIPELINE_ATTEMPTS attempts a PIPELINE_ERROR names the message and the cursor moves on.
PIPELINE_ATTEMPTS = env_int("ZEROSHOT_PIPELINE_ATTEMPTS", 5)
PIPELINE_RETRY_SECONDS = float(os.environ.get("ZEROSHOT_PIPELINE_RETRY_SECONDS", 0.5))
# How long a read that depends on the pipeline (the snapshot, a build "now") waits for it to
# pass the cluster's newest message before it answers with what there is.
PIPELINE_READ_WAIT_SECONDS = float(os.environ.get("ZEROSHOT_PIPELINE_READ_WAIT_SECONDS", 5.0))

# Conductor watchdog (SPEC §7.7, zeroshot's orchestrator.js _registerConductorWatchdog): a
# conductor-role task that completed this long ago without any CLUSTER_OPERATIONS in its
# cluster fails the cluster (zeroshot: 30 s).
CONDUCTOR_WATCHDOG_SECONDS = float(os.environ.get("CONDUCTOR_WATCHDOG_SECONDS", 30.0))

# Runs (SPEC §7.3): a retried task waits this long, doubled per attempt, before its next claim.
RUNS_RETRY_BASE_SECONDS = float(os.environ.get("ZEROSHOT_RETRY_BASE_SECONDS", 2.0))
# A running cluster whose agents all sit idle, with nothing queued, claimed or waiting, for longer
# than this is shown as stalled (SPEC §7.3): it can no longer move on its own.
CLUSTER_STALL_SECONDS = float(os.environ.get("ZEROSHOT_CLUSTER_STALL_SECONDS", 600))
# Logic scripts (hooks, transforms, trigger logic): sandbox processes at most per server process;
# evaluations beyond them wait for one (runs/logic/engine.py, docs/threat-model.md).
RUNS_SANDBOX_POOL_SIZE = env_int("RUNS_SANDBOX_POOL_SIZE", 4)

# The largest request body, refused by its Content-Length (or, for a chunked body, by the
# bytes counted as they arrive) before anything reads or parses it (zeroshot_web/limits.py).
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 16 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES
# The threads a server process keeps for its requests' synchronous work (every request that
# reaches Django: the dashboard's pages, the API's queries), each keeping its database
# connection; past them a request gets a thread of its own, as Django gives every request
# (zeroshot_web/handler.py).
REQUEST_THREADS = env_int("ZEROSHOT_REQUEST_THREADS", 8)
# Where async views (the publish endpoints) do their database work: on long-lived threads that
# keep their connection (ledger/threads.py), unless this is set (the test suite).
DATABASE_WORK_ON_REQUEST_THREAD = False
# Seconds a verified API key is trusted without asking the database again: a key deleted in
# another process stops working within this time (one deleted in the same process at once).
API_KEY_CACHE_SECONDS = float(os.environ.get("API_KEY_CACHE_SECONDS", 5.0))
# Requests per API key on the agent API, as "N/s", "N/m" or "N/h"; empty turns the limit off.
# Per minute, so that bursts of a busy agent pass while a runaway loop is stopped in seconds.
API_RATE_LIMIT = os.environ.get("API_RATE_LIMIT", "3000/m").strip() or None
if API_RATE_LIMIT and not re.fullmatch(
    r"[1-9][0-9]*/[0-9]*(s|sec|m|min|h|hour|d|day)", API_RATE_LIMIT
):
    raise ImproperlyConfigured(
        "API_RATE_LIMIT is requests per period such as 50/s, 600/m or 10/5s; "
        f"got {API_RATE_LIMIT!r}"
    )

# Operations (issue 21, operations/). Readiness fails while a live cluster has more messages
# than this that the post-commit pipeline has not offered to its stages yet.
OPERATIONS_READY_MAX_PIPELINE_LAG = env_int("ZEROSHOT_READY_MAX_PIPELINE_LAG", 1000)


def _retention() -> RetentionPolicy | None:
    """The daily prune's policy (operations/schedule.py), or None: clusters are kept forever."""
    older_than = os.environ.get("ZEROSHOT_RETENTION_OLDER_THAN", "").strip()
    if not older_than:
        return None
    try:
        return RetentionPolicy.parse(
            older_than=older_than, states=os.environ.get("ZEROSHOT_RETENTION_STATES", "")
        )
    except PolicyError as error:
        raise ImproperlyConfigured(f"ZEROSHOT_RETENTION_*: {error}") from None


# Retention: with ZEROSHOT_RETENTION_OLDER_THAN (30d…) each server checks hourly that the day's
# prune of ended clusters (ZEROSHOT_RETENTION_STATES, default every ended state) has run,
# exporting each one into ZEROSHOT_RETENTION_EXPORT_DIR first when it is set.
OPERATIONS_RETENTION = _retention()
OPERATIONS_RETENTION_EXPORT_DIR = os.environ.get("ZEROSHOT_RETENTION_EXPORT_DIR", "").strip()
# /metrics (Prometheus text format) answers the bearer of this token only; empty turns it off.
OPERATIONS_METRICS_TOKEN = os.environ.get("ZEROSHOT_METRICS_TOKEN", "").strip()
# Whether a family may carry a cluster id label (the pipeline's lag per cluster).
OPERATIONS_METRICS_CLUSTER_LABELS = env_bool("ZEROSHOT_METRICS_CLUSTER_LABELS")
# OpenTelemetry: a trace per task (operations/tracing.py), exported over OTLP/HTTP when on. The
# endpoint is the collector's traces URL (Langfuse, Phoenix, an OpenTelemetry Collector…). The
# prompt is exported only when ZEROSHOT_OTEL_PROMPTS asks for it; results and contents never are.
OPERATIONS_OTEL_ENABLED = env_bool("ZEROSHOT_OTEL")
OPERATIONS_OTEL_ENDPOINT = (
    os.environ.get("ZEROSHOT_OTEL_ENDPOINT", "").strip() or "http://127.0.0.1:4318/v1/traces"
)
OPERATIONS_OTEL_PROMPTS = env_bool("ZEROSHOT_OTEL_PROMPTS")
OPERATIONS_OTEL_SERVICE_NAME = os.environ.get("ZEROSHOT_OTEL_SERVICE_NAME", "").strip() or (
    "zeroshot-web"
)
# Probes and scrapers speak plain HTTP inside the deployment, even when browsers are sent to HTTPS.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
