// The cluster template's admin page: the JSON editor over the body field, and the preview of
// every agent against a cluster before saving. Static file only: the CSP forbids inline scripts.
(function () {
  "use strict";

  function csrfToken() {
    var input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function attachEditor() {
    var textarea = document.querySelector("textarea.template-json");
    if (!textarea || !window.ZeroshotEditor) { return null; }
    return window.ZeroshotEditor.attach(textarea, {
      checkUrl: textarea.getAttribute("data-check-url"),
      csrfToken: csrfToken()
    });
  }

  function loadPreview(slot, textarea) {
    var url = slot.getAttribute("data-url");
    fetch(url, { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : ""; })
      .then(function (html) {
        // The server renders and escapes everything; agent text stays text.
        slot.innerHTML = html;
        var controls = slot.querySelector("[data-preview-form]");
        var run = slot.querySelector("[data-preview-run]");
        if (controls && run) {
          run.addEventListener("click", function (event) { preview(event, controls, slot, textarea); });
        }
      });
  }

  function preview(event, form, slot, textarea) {
    event.preventDefault();
    var status = form.querySelector("[data-preview-status]");
    var results = slot.querySelector("[data-preview-results]");
    var data = new FormData();
    data.append("body", textarea.value);
    data.append("cluster", form.querySelector("[data-preview-cluster]").value);
    if (status) { status.textContent = "Building…"; }
    fetch(slot.getAttribute("data-url"), {
      method: "POST",
      body: data,
      credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken() }
    })
      .then(function (response) { return response.text(); })
      .then(function (html) {
        results.innerHTML = html;
        if (status) { status.textContent = ""; }
        document.dispatchEvent(new CustomEvent("zeroshot:content", { detail: { root: results } }));
      })
      .catch(function () { if (status) { status.textContent = "The preview failed; try again."; } });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var textarea = document.querySelector("textarea.template-json");
    attachEditor();
    var slot = document.getElementById("template-preview");
    if (slot && textarea) { loadPreview(slot, textarea); }
  });
})();
