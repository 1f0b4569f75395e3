"""URL routes: the admin, the agent API and the operator dashboard."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic.base import RedirectView

from zeroshot_web.api import api

admin.site.site_header = "zeroshot-web admin"
admin.site.site_title = "zeroshot-web admin"
admin.site.index_title = "Templates, clusters and keys"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Pages without our <link rel="icon"> (the admin, the API docs) still ask for this path.
    path("favicon.ico", RedirectView.as_view(url=static("img/favicon.svg"), permanent=True)),
    path("", include("operations.urls")),
    path("", include("dashboard.urls")),
]
