/* zeroshot-web dashboard behaviour. Static file only: the CSP forbids inline scripts.
 *
 * - <time data-ms> shows the operator's local time ("2 min ago" for data-format="relative",
 *   the clock time for "time", date and time for "full"), with the exact local time on hover.
 * - datetime-local filter inputs show and send local time; the URL carries epoch milliseconds.
 * - live timeline: de-duplicates pushed rows, marks them fresh, counts them in an "N new" pill
 *   while the operator reads further down, and shows the websocket's state.
 */
(function () {
  "use strict";

  var fullFormat = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"
  });
  var clockFormat = new Intl.DateTimeFormat(undefined, {
    hour: "2-digit", minute: "2-digit", second: "2-digit"
  });
  var dayClockFormat = new Intl.DateTimeFormat(undefined, {
    month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit"
  });
  var relative = typeof Intl.RelativeTimeFormat === "function"
    ? new Intl.RelativeTimeFormat(undefined, { numeric: "auto", style: "short" }) : null;

  function sameDay(a, b) {
    return a.getFullYear() === b.getFullYear() && a.getMonth() === b.getMonth() &&
      a.getDate() === b.getDate();
  }

  function ago(ms) {
    var seconds = Math.round((ms - Date.now()) / 1000);
    var abs = Math.abs(seconds);
    if (abs < 45) { return "just now"; }
    var units = [["minute", 60, 3600], ["hour", 3600, 86400], ["day", 86400, 86400 * 30],
      ["month", 86400 * 30, 86400 * 365], ["year", 86400 * 365, Infinity]];
    for (var i = 0; i < units.length; i++) {
      if (abs < units[i][2]) {
        var n = Math.round(seconds / units[i][1]);
        return relative ? relative.format(n, units[i][0]) : Math.abs(n) + " " + units[i][0] + "s ago";
      }
    }
    return "";
  }

  function renderTime(el) {
    var ms = Number(el.getAttribute("data-ms"));
    if (!el.getAttribute("data-ms") || !isFinite(ms)) { return; }
    var date = new Date(ms);
    var mode = el.getAttribute("data-format") || "full";
    var text;
    if (mode === "relative") { text = ago(ms); }
    else if (mode === "time") { text = sameDay(date, new Date()) ? clockFormat.format(date) : dayClockFormat.format(date); }
    else { text = fullFormat.format(date); }
    el.textContent = text;
    el.title = fullFormat.format(date);
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function localInputValue(ms) {
    var d = new Date(ms);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  function process(root) {
    var scope = root && root.querySelectorAll ? root : document;
    if (scope.matches && scope.matches("time[data-ms]")) { renderTime(scope); }
    scope.querySelectorAll("time[data-ms]").forEach(renderTime);
    scope.querySelectorAll("input[type=datetime-local][data-ms]").forEach(function (input) {
      var ms = Number(input.getAttribute("data-ms"));
      if (input.getAttribute("data-ms") && isFinite(ms)) { input.value = localInputValue(ms); }
      input.removeAttribute("data-ms");
    });
    document.documentElement.classList.add("js");
  }

  // Time filters travel as epoch milliseconds: the same link means the same instant anywhere.
  document.addEventListener("htmx:configRequest", function (event) {
    var params = event.detail.parameters;
    ["since", "until"].forEach(function (name) {
      var value = params[name];
      if (typeof value === "string" && /^\d{4}-\d\d-\d\dT\d\d:\d\d/.test(value)) {
        var ms = new Date(value).getTime();
        if (isFinite(ms)) { params[name] = String(ms); }
      }
    });
    ["q", "state", "topic", "sender", "since", "until"].forEach(function (name) {
      if (params[name] === "") { delete params[name]; }
    });
  });

  // ---- live timeline -------------------------------------------------------------------
  var unseen = 0;

  function timelineTopVisible(list) {
    return list.getBoundingClientRect().top >= 0;
  }

  function pill() { return document.querySelector("[data-new-pill]"); }

  function updatePill() {
    var button = pill();
    if (!button) { return; }
    button.hidden = unseen === 0;
    button.textContent = unseen + " new ↑";
  }

  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    var target = event.detail.target;
    if (!target || target.id !== "timeline-rows") { return; }
    var fragment = event.detail.fragment;
    var rows = fragment && fragment.querySelectorAll ? fragment.querySelectorAll("li.msg") : [];
    var fresh = 0;
    rows.forEach(function (row) {
      // A push may race the page's own query, and a reconnect may resend: keep the first copy.
      if (document.getElementById(row.id)) { row.remove(); return; }
      row.classList.add("fresh");
      fresh += 1;
    });
    if (fresh === 0) { event.detail.shouldSwap = false; return; }
    var empty = target.querySelector("li.empty");
    if (empty) { empty.remove(); }
    if (!timelineTopVisible(target)) { unseen += fresh; updatePill(); }
  });

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-new-pill]") : null;
    if (!button) { return; }
    unseen = 0;
    updatePill();
    var timeline = document.getElementById("timeline");
    if (timeline) { timeline.scrollIntoView({ block: "start" }); }
  });

  window.addEventListener("scroll", function () {
    var list = document.getElementById("timeline-rows");
    if (unseen && list && timelineTopVisible(list)) { unseen = 0; updatePill(); }
  }, { passive: true });

  function liveState(event, text, state) {
    var region = event.target && event.target.closest ? event.target.closest("#timeline") : null;
    var status = region ? region.querySelector("[data-live-status]") : null;
    if (!status) { return; }
    status.setAttribute("data-state", state);
    status.querySelector(".live-text").textContent = text;
  }
  document.addEventListener("htmx:wsOpen", function (e) {
    liveState(e, "live", "open");
    var region = e.target && e.target.closest ? e.target.closest("#timeline") : null;
    // Pushes are hints: after a dropped connection, reload the region to catch up on anything
    // missed. The reloaded region opens its own socket, without the "dropped" mark.
    if (region && region.getAttribute("data-dropped") && window.htmx) {
      window.htmx.ajax("GET", window.location.href, { target: "#timeline", swap: "outerHTML" });
    }
  });
  document.addEventListener("htmx:wsClose", function (e) {
    liveState(e, "reconnecting…", "closed");
    var region = e.target && e.target.closest ? e.target.closest("#timeline") : null;
    if (region) { region.setAttribute("data-dropped", "1"); }
  });
  document.addEventListener("htmx:wsError", function (e) { liveState(e, "reconnecting…", "closed"); });

  document.addEventListener("DOMContentLoaded", function () {
    process(document);
    if (window.htmx) { window.htmx.onLoad(function (elt) { process(elt); }); }
    window.setInterval(function () {
      document.querySelectorAll("time[data-ms][data-format=relative]").forEach(renderTime);
    }, 30000);
  });
})();
