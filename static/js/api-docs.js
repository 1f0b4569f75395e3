/* The API docs page: Swagger UI from the page's settings (static file: the CSP forbids inline
 * scripts). A signed-in operator's requests carry the CSRF token, as the dashboard's do. */
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    var root = document.getElementById("swagger-ui");
    var settings = document.getElementById("swagger-settings");
    if (!root || !settings || typeof window.SwaggerUIBundle !== "function") { return; }
    var config = JSON.parse(settings.textContent);
    var token = root.getAttribute("data-csrf-token");
    config.dom_id = "#swagger-ui";
    config.presets = [window.SwaggerUIBundle.presets.apis];
    config.layout = "BaseLayout";
    config.requestInterceptor = function (request) {
      if (token) { request.headers["X-CSRFToken"] = token; }
      return request;
    };
    window.SwaggerUIBundle(config);
  });
})();
