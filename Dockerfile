# The server's image: slim Python, the dependencies pinned in pyproject.toml, static files
# collected at build time, uvicorn serving as a user without privileges. compose.yaml runs it as
# N servers behind one port, a migration job and runners; docs/operators-guide.md ("Deploy with
# containers") says how to scale each part. tests/deploy/test_deployment.py runs this file's CMD.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=zeroshot_web.settings \
    ZEROSHOT_DATA_DIR=/data \
    ZEROSHOT_STATIC_ROOT=/app/staticfiles

WORKDIR /app

# The dependencies first: a change of the code keeps this layer.
COPY pyproject.toml README.md ./
RUN pip install .

# The code (.dockerignore keeps the venv, data, tests and benchmarks out of the build context).
COPY . .

# Static files are collected once, into the image; the key only lets the settings load.
RUN DJANGO_SECRET_KEY=collectstatic-only-never-served python manage.py collectstatic --noinput \
    && useradd --system --uid 10001 --user-group --home-dir /data --no-create-home zeroshot \
    && mkdir -p /data \
    && chown zeroshot:zeroshot /data

USER zeroshot
VOLUME ["/data"]
EXPOSE 8000

# Liveness only (/healthz touches nothing); the load balancer may also watch /readyz.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]

# One server process (about one core; docs/decisions/0190-uvicorn.md): uvicorn on uvloop and
# httptools, a listen queue that holds a burst of long-poll claims, websockets on the sans-I/O
# implementation (docs/decisions/0211) with a pushed frame's bytes made once for all its sockets
# (0290) and without compression, the lifespan (traces flushed at shutdown), no access log line
# per request.
# Keep-alive outlasts nginx's upstream keepalive (60 s); a stop lets requests end for 5 s.
# X-Forwarded-* are Django's to trust (DJANGO_BEHIND_PROXY), not the server's.
CMD ["uvicorn", "--host", "0.0.0.0", "--port", "8000", "--backlog", "1024", \
     "--loop", "uvloop", "--http", "httptools", \
     "--ws", "zeroshot_web.websocket_frames:SharedFrameProtocol", \
     "--ws-per-message-deflate", "false", "--lifespan", "on", "--no-access-log", \
     "--no-proxy-headers", "--timeout-keep-alive", "75", "--timeout-graceful-shutdown", "5", \
     "zeroshot_web.asgi:application"]
