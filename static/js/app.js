/* zeroshot-web dashboard behaviour. Static file only: the CSP forbids inline scripts.
 *
 * - <time data-ms> (and SVG <text data-ms>) shows the operator's local time: "2 min ago" for
 *   data-format="relative", the clock time for "time", clock time with the day unless today
 *   (and the year, to the minute, unless this year) for "stamp", date and time for "full",
 *   and short axis labels; the exact local time on hover.
 * - time filters (input[data-moment]) show and take local time, or "-2h"-style offsets; the URL
 *   carries epoch milliseconds.
 * - skip links move the focus to their target; the narrow layout's "Filters" button folds the
 *   filters away.
 * - groups marked data-roving (bar segments, chart columns) are one Tab stop, arrow keys move
 *   inside; hovering or focusing an item with data-describe writes it under its figure.
 * - live timeline: de-duplicates pushed rows, marks them fresh, counts them in an "N new" pill
 *   while the operator reads further down, keeps the page's last sequence, reconnects within
 *   about a second of the server coming back; on every connect (the first one too) fetches
 *   what was published after the page's rows (after=<sequence>).
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
  // An older year's rows say their year (the minute is enough there; the title has the rest).
  var yearClockFormat = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit"
  });
  var axisFormats = {
    "axis-seconds": clockFormat,
    "axis-minutes": new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" }),
    "axis-days": new Intl.DateTimeFormat(undefined, {
      month: "short", day: "numeric", hour: "2-digit", minute: "2-digit"
    })
  };
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
    var raw = el.getAttribute("data-ms");
    var ms = Number(raw);
    if (!raw || !isFinite(ms)) { return; }
    var date = new Date(ms);
    var mode = el.getAttribute("data-format") || "full";
    var text;
    if (mode === "relative") { text = ago(ms); }
    else if (mode === "elapsed") { text = elapsed(Date.now() - ms); }
    else if (mode === "time") { text = clockFormat.format(date); }
    else if (mode === "stamp") {
      var today = new Date();
      text = sameDay(date, today) ? clockFormat.format(date)
        : date.getFullYear() === today.getFullYear() ? dayClockFormat.format(date)
          : yearClockFormat.format(date);
    } else if (axisFormats[mode]) { text = axisFormats[mode].format(date); }
    else { text = fullFormat.format(date); }
    el.textContent = text;
    if (el.namespaceURI === "http://www.w3.org/2000/svg") { return; }
    el.title = fullFormat.format(date);
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  // How long a task has run: "42s", "3m 05s", "1h 02m".
  function elapsed(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) { return s + "s"; }
    if (s < 3600) { return Math.floor(s / 60) + "m " + pad(s % 60) + "s"; }
    return Math.floor(s / 3600) + "h " + pad(Math.floor(s / 60) % 60) + "m";
  }

  function localText(ms) {
    var d = new Date(ms);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  // What an operator types in a time filter, read in their own time zone: "-2h" (before now),
  // "09:15" (today), "2026-02-02", "2026-02-02 09:15[:30]". Anything else goes as typed and
  // the page reports it.
  function readMoment(value) {
    var text = value.trim();
    var m = /^-\s*(\d{1,6})\s*([smhd])$/i.exec(text);
    if (m) {
      var unit = { s: 1000, m: 60000, h: 3600000, d: 86400000 }[m[2].toLowerCase()];
      return Date.now() - Number(m[1]) * unit;
    }
    m = /^(\d{1,2}):(\d{2})(?::(\d{2}))?$/.exec(text);
    if (m) {
      var today = new Date();
      today.setHours(Number(m[1]), Number(m[2]), Number(m[3] || 0), 0);
      return today.getTime();
    }
    m = /^(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2}))?)?$/.exec(text);
    if (m) {
      return new Date(Number(m[1]), Number(m[2]) - 1, Number(m[3]), Number(m[4] || 0),
        Number(m[5] || 0), Number(m[6] || 0)).getTime();
    }
    return null;
  }

  function process(root) {
    var scope = root && root.querySelectorAll ? root : document;
    if (scope.matches && scope.matches("[data-ms][data-format]")) { renderTime(scope); }
    scope.querySelectorAll("time[data-ms], text[data-ms]").forEach(renderTime);
    scope.querySelectorAll("input[data-moment][data-ms]").forEach(function (input) {
      var ms = Number(input.getAttribute("data-ms"));
      if (input.getAttribute("data-ms") && isFinite(ms)) { input.value = localText(ms); }
      input.removeAttribute("data-ms");
    });
    scope.querySelectorAll("[data-roving]").forEach(rovingInit);
    document.documentElement.classList.add("js");
  }

  // Time filters travel as epoch milliseconds: the same link means the same instant anywhere.
  document.addEventListener("htmx:configRequest", function (event) {
    var params = event.detail.parameters;
    ["since", "until"].forEach(function (name) {
      var value = params[name];
      if (typeof value === "string" && value.trim() && !/^\d+$/.test(value.trim())) {
        var ms = readMoment(value);
        if (ms !== null && isFinite(ms)) { params[name] = String(ms); }
      }
    });
    ["q", "state", "topic", "sender", "since", "until"].forEach(function (name) {
      if (typeof params[name] === "string" && params[name].trim() === "") { delete params[name]; }
    });
  });

  // ---- skip links and the narrow layout's filter toggle ---------------------------------
  document.addEventListener("click", function (event) {
    var link = event.target.closest ? event.target.closest("a[data-skip]") : null;
    if (!link) { return; }
    var target = document.getElementById(link.getAttribute("href").slice(1));
    if (!target) { return; }
    event.preventDefault();
    if (!target.matches("a[href], button, input, select, textarea, [tabindex]")) {
      target.setAttribute("tabindex", "-1");
    }
    target.focus();
    target.scrollIntoView({ block: "start" });
  });

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-toggle]") : null;
    if (!button) { return; }
    var panel = document.getElementById(button.getAttribute("aria-controls"));
    if (!panel) { return; }
    var open = button.getAttribute("aria-expanded") !== "true";
    button.setAttribute("aria-expanded", open ? "true" : "false");
    panel.classList.toggle("open", open);
    if (open) {
      var first = panel.querySelector("input, select");
      if (first) { first.focus(); }
    }
  });

  // ---- one Tab stop per bar or chart; arrow keys inside; descriptions under the figure ---
  function rovingItems(group) {
    return Array.prototype.slice.call(group.querySelectorAll("[data-describe]"));
  }

  function rovingInit(group) {
    var items = rovingItems(group);
    if (!items.length || group.hasAttribute("data-roving-ready")) { return; }
    group.setAttribute("data-roving-ready", "");
    var start = group.getAttribute("data-roving") === "last" ? items.length - 1 : 0;
    items.forEach(function (item, i) { item.setAttribute("tabindex", i === start ? "0" : "-1"); });
  }

  document.addEventListener("keydown", function (event) {
    var item = event.target.closest ? event.target.closest("[data-roving] [data-describe]") : null;
    if (!item) { return; }
    var items = rovingItems(item.closest("[data-roving]"));
    var i = items.indexOf(item);
    var next = { ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1,
      Home: 0, End: items.length - 1 }[event.key];
    if (next === undefined) { return; }
    event.preventDefault();
    next = Math.max(0, Math.min(items.length - 1, next));
    items[i].setAttribute("tabindex", "-1");
    items[next].setAttribute("tabindex", "0");
    items[next].focus();
  });

  function describe(event) {
    var item = event.target instanceof Element ? event.target.closest("[data-describe]") : null;
    if (!item) { return; }
    var figure = item.closest("figure");
    var caption = figure ? figure.querySelector("[data-caption]") : null;
    if (caption) { caption.textContent = item.getAttribute("data-describe") || ""; }
  }
  document.addEventListener("focusin", describe);
  document.addEventListener("mouseover", describe);

  // ---- live timeline -------------------------------------------------------------------
  var unseen = 0;

  function pill() { return document.querySelector("[data-new-pill]"); }

  // Whether the newest rows are in view: the top of the list is not above the sticky header.
  function newestInView(list) {
    var head = document.querySelector(".timeline-head");
    var headBottom = head ? head.getBoundingClientRect().bottom : 0;
    return list.getBoundingClientRect().top >= headBottom - 2;
  }

  function updatePill() {
    var button = pill();
    if (!button) { return; }
    button.hidden = unseen === 0;
    button.textContent = unseen + " new ↑";
    button.setAttribute("aria-label", unseen + " new message" + (unseen === 1 ? "" : "s") +
      ": show the newest");
  }

  function timelineRegion() { return document.getElementById("timeline"); }

  function noteSequence(sequence) {
    var region = timelineRegion();
    if (!region || !isFinite(sequence)) { return; }
    var known = Number(region.getAttribute("data-last-sequence") || 0);
    if (sequence > known) { region.setAttribute("data-last-sequence", String(sequence)); }
  }

  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    var target = event.detail.target;
    var fragment = event.detail.fragment;
    if (!target || !fragment) { return; }
    if (target.id === "cluster-count") {
      var counted = fragment.querySelector ? fragment.querySelector("[data-sequence]") : null;
      var sequence = Number(counted ? counted.getAttribute("data-sequence") : NaN);
      var current = Number(target.getAttribute("data-sequence") || 0);
      noteSequence(sequence);
      // Pushes and a catch-up can cross: the count never goes back.
      if (isFinite(sequence) && sequence < current) { event.detail.shouldSwap = false; }
      return;
    }
    if (target.id !== "timeline-rows") { return; }
    var rows = fragment.querySelectorAll ? fragment.querySelectorAll("li.msg") : [];
    var fresh = 0;
    rows.forEach(function (row) {
      noteSequence(Number(row.getAttribute("data-sequence")));
      // A push may race the page's own query, and a catch-up may resend: keep the first copy.
      if (document.getElementById(row.id)) { row.remove(); return; }
      row.classList.add("fresh");
      fresh += 1;
    });
    if (fresh === 0) { event.detail.shouldSwap = false; return; }
    var empty = target.querySelector("li.empty");
    if (empty) { empty.remove(); }
    if (!newestInView(target)) { unseen += fresh; updatePill(); }
  });

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-new-pill]") : null;
    if (!button) { return; }
    unseen = 0;
    updatePill();
    var newest = document.querySelector("#timeline-rows li.msg");
    if (newest) {
      newest.scrollIntoView({ block: "start" });
      var summary = newest.querySelector("summary");
      if (summary) { summary.focus({ preventScroll: true }); }
    }
  });

  window.addEventListener("scroll", function () {
    var list = document.getElementById("timeline-rows");
    if (unseen && list && newestInView(list)) { unseen = 0; updatePill(); }
  }, { passive: true });

  function liveState(text, state) {
    var status = document.querySelector("#timeline [data-live-status]");
    if (!status) { return; }
    status.setAttribute("data-state", state);
    status.querySelector(".live-text").textContent = text;
  }

  // After a server restart the page should be back as soon as the server is: retry every
  // 0.5–1 s (with a little jitter so that many pages do not knock at the same instant).
  if (window.htmx) {
    window.htmx.config.wsReconnectDelay = function () { return 500 + Math.random() * 500; };
  }

  function catchUp(region) {
    var url = region.getAttribute("data-missed-url");
    if (!url || !window.htmx) { return; }
    var params = new URLSearchParams(window.location.search);
    params.delete("before");
    params.set("after", region.getAttribute("data-last-sequence") || "0");
    window.htmx.ajax("GET", url + "?" + params.toString(), { target: "#timeline", swap: "none" });
  }

  document.addEventListener("htmx:wsOpen", function (event) {
    liveState("live", "open");
    var region = event.target && event.target.closest ? event.target.closest("#timeline") : null;
    // Pushes are hints (SPEC §1.4). The socket is subscribed once it is open: fetch what was
    // published after the page's last sequence, on the first connect (messages published
    // between the page's query and the subscription are pushed to nobody) as after a drop.
    if (region) {
      region.removeAttribute("data-dropped");
      catchUp(region);
    }
  });

  // Codes the websocket extension retries by itself; for the others (a server going away
  // says 1001) the page asks for a reconnect, unless the server refused it (4xxx) or the
  // socket belonged to a region that has been replaced.
  var RETRIED = [1006, 1011, 1012, 1013];
  document.addEventListener("htmx:wsClose", function (event) {
    var region = event.target && event.target.closest ? event.target.closest("#timeline") : null;
    if (!region || !document.body.contains(region)) { return; }
    liveState("reconnecting…", "closed");
    region.setAttribute("data-dropped", "1");
    var code = event.detail && event.detail.event ? event.detail.event.code : 1006;
    var wrapper = event.detail ? event.detail.socketWrapper : null;
    if (RETRIED.indexOf(code) < 0 && code < 4000 && code !== 1000 && code !== 1005 && wrapper) {
      window.setTimeout(function () {
        if (document.body.contains(region)) { wrapper.reconnect(); }
      }, 500 + Math.random() * 500);
    }
  });
  document.addEventListener("htmx:wsError", function () { liveState("reconnecting…", "closed"); });

  // Forms that change a run (stop a cluster) ask first.
  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute && event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });

  // A link to something inside a folded <details> (the launch form: /#launch-form) unfolds it.
  function revealTarget() {
    var id = window.location.hash.slice(1);
    var target = id ? document.getElementById(id) : null;
    var folded = target && target.closest ? target.closest("details:not([open])") : null;
    if (folded) { folded.open = true; target.scrollIntoView({ block: "start" }); }
  }
  window.addEventListener("hashchange", revealTarget);

  document.addEventListener("DOMContentLoaded", function () {
    process(document);
    revealTarget();
    if (window.htmx) { window.htmx.onLoad(function (elt) { process(elt); }); }
    window.setInterval(function () {
      document.querySelectorAll("time[data-ms][data-format=relative]").forEach(renderTime);
    }, 30000);
    window.setInterval(function () {
      document.querySelectorAll("time[data-ms][data-format=elapsed]").forEach(renderTime);
    }, 1000);
  });
})();
