"""The operator's endpoints outside the API: ``/healthz``, ``/readyz`` and ``/metrics``."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from operations.health import readiness


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
