// The context inspector's small behaviours; the page works without them.
// - the max-tokens slider and number box follow each other;
// - each bar segment's label shows in full where it fits, else only its priority, else
//   nothing: never a word cut in the middle (the hover and focus text has everything).
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

  var PADDING = 10;

  function fitLabels(root) {
    var scope = root && root.querySelectorAll ? root : document;
    scope.querySelectorAll(".bb-bar .seg").forEach(function (segment) {
      var label = segment.querySelector(".seg-label");
      var fill = segment.querySelector(".seg-fill");
      if (!label || !fill) return;
      var room = fill.getBoundingClientRect().width - PADDING;
      var choices = [label.getAttribute("data-full"), label.getAttribute("data-short"), ""];
      for (var i = 0; i < choices.length; i++) {
        label.textContent = choices[i] || "";
        if (!choices[i] || label.getComputedTextLength() <= room) break;
      }
    });
  }

  var pending = null;
  function refit() {
    if (pending) window.cancelAnimationFrame(pending);
    pending = window.requestAnimationFrame(function () { pending = null; fitLabels(document); });
  }

  document.addEventListener("DOMContentLoaded", refit);
  document.addEventListener("htmx:afterSettle", refit);
  // Bars put in place by other scripts (the admin's template preview) say so with this event.
  document.addEventListener("zeroshot:content", refit);
  window.addEventListener("resize", refit);
})();
