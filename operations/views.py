"""The operator's endpoints outside the API: ``/healthz``, ``/readyz`` and ``/metrics``."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from operations.health import readiness
from operations.metrics import metrics_exposition


@never_cache
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness: the process answers HTTP. Touches nothing else, so a slow database never gets
    a live server restarted."""
    return JsonResponse({"status": "alive"})


@never_cache
@require_GET
async def readyz(request: HttpRequest) -> HttpResponse:
    """Readiness: 200 when the database, the channel layer and the pipeline are fine, else 503."""
    result = await readiness()
    return JsonResponse(result.as_json(), status=200 if result.ready else 503)


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text format, for the bearer of ``OPERATIONS_METRICS_TOKEN``; absent without it."""
    token = settings.OPERATIONS_METRICS_TOKEN
    if not token:
        raise Http404("metrics are off")
    given = request.headers.get("Authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        response = HttpResponse("a bearer token is needed\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(metrics_exposition(), content_type=CONTENT_TYPE_LATEST)
