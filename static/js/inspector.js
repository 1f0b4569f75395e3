// The context inspector's small behaviours; the page works without them.
// - the max-tokens slider and number box follow each other;
// - hovering or focusing a bar segment writes what it is into the caption under the bar.
(function () {
  "use strict";

  // Capture phase: the number box must hold the slider's value before htmx reads the form.
  document.addEventListener("input", function (event) {
    var target = event.target;
    if (!(target instanceof HTMLInputElement)) return;
    if (target.dataset.sync) {
      var box = document.getElementById(target.dataset.sync);
      if (box) box.value = target.value;
    } else if (target.id === "max-tokens") {
      var slider = document.querySelector('[data-sync="max-tokens"]');
      var value = parseInt(target.value, 10);
      if (slider && value > 0) {
        if (value > parseInt(slider.max, 10)) slider.max = String(value);
        slider.value = String(value);
      }
    }
  }, true);

  function describe(event) {
    var segment = event.target instanceof Element ? event.target.closest(".seg") : null;
    if (!segment) return;
    var figure = segment.closest("figure");
    var caption = figure ? figure.querySelector("[data-caption]") : null;
    if (caption) caption.textContent = segment.getAttribute("data-describe") || "";
  }
  document.addEventListener("focusin", describe);
  document.addEventListener("mouseover", describe);
})();
