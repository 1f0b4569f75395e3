"""Settings, read from the environment (SPEC §6.6). One file: the project is small."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("ZEROSHOT_DATA_DIR", BASE_DIR / "data"))


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


DEBUG = env_bool("DJANGO_DEBUG", default=False)
# Local runs and tests use a fixed development key; a deployment sets DJANGO_SECRET_KEY.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or "dev-only-insecure-key-zeroshot-web"
ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")
    if h.strip()
]
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()
]

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
    "dashboard",
]

MIDDLEWARE = [
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
    "zeroshot_web.middleware.ApiErrorShapeMiddleware",
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
        },
    },
]


def _database() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL")
    if url:
        config: dict[str, Any] = dict(dj_database_url.parse(url, conn_max_age=0))
    else:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        config = {"ENGINE": "django.db.backends.sqlite3", "NAME": DATA_DIR / "zeroshot.sqlite3"}
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # STYLE.md rule 9: writers queue behind one lock instead of failing with "locked".
        config["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        # A file, not memory, so that the test suite runs with WAL like production; one per
        # process so that two test runs never share it.
        config.setdefault("TEST", {})
        config["TEST"].setdefault("NAME", str(DATA_DIR / f"test-{os.getpid()}.sqlite3"))
    return config


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "")
CHANNEL_LAYERS: dict[str, Any] = (
    {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
    if REDIS_URL
    else {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
)

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
STATIC_ROOT = DATA_DIR / "staticfiles"
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
LEDGER_MAX_TEXT_BYTES = int(os.environ.get("LEDGER_MAX_TEXT_BYTES", 1024 * 1024))
LEDGER_MAX_JSON_BYTES = int(os.environ.get("LEDGER_MAX_JSON_BYTES", 1024 * 1024))
LEDGER_MAX_BATCH = int(os.environ.get("LEDGER_MAX_BATCH", 1000))

# Context engine (SPEC §3.4, §6.2).
CONTEXT_MAX_CHARS = int(os.environ.get("ZEROSHOT_CONTEXT_MAX_CHARS", 500_000))
CONTEXT_METRICS_STDOUT = env_bool("ZEROSHOT_CONTEXT_METRICS")
CONTEXT_METRICS_LEDGER = env_bool("ZEROSHOT_CONTEXT_METRICS_LEDGER")

# A request body may hold a full batch of maximal messages.
DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024 * 1024
