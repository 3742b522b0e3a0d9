// cogworker's Web UI: local times, live refresh, the live chart's points, select-all boxes.
// Served as a file (the Content-Security-Policy allows no inline script), and nothing else is needed:
// every page works without it.
(function () {
  "use strict";

  var STORE_ON = "cogworker.live";
  var STORE_INTERVAL = "cogworker.liveInterval";
  var body = document.body;
  var minS = Number(body.dataset.liveMin) || 2;
  var maxS = Number(body.dataset.liveMax) || 20;
  var defaultS = Number(body.dataset.liveDefault) || 5;
  var timer = null;
  var last = null; // the previous poll's totals, for the live chart's per-poll deltas
  var points = { processed: [], failed: [] };
  var MAX_POINTS = 60;

  // The interval is whatever the browser stored, clamped to the server's bounds: a tampered value
  // can't make the page poll faster than every minS seconds.
  function interval() {
    var stored = Number(localStorage.getItem(STORE_INTERVAL));
    if (!isFinite(stored) || stored <= 0) stored = defaultS;
    return Math.min(maxS, Math.max(minS, stored));
  }

  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      if (el.dataset.local) return;
      var when = new Date(el.getAttribute("datetime"));
      if (isNaN(when.getTime())) return;
      el.title = el.textContent;
      el.textContent = when.toLocaleString();
      el.dataset.local = "1";
    });
  }

  function recordTotals() {
    var totals = document.getElementById("totals");
    if (!totals) return;
    var now = { processed: Number(totals.dataset.processed), failed: Number(totals.dataset.failed) };
    if (last) {
      ["processed", "failed"].forEach(function (k) {
        points[k].push(Math.max(0, now[k] - last[k]));
        if (points[k].length > MAX_POINTS) points[k].shift();
      });
      // static/charts.js draws them (on the dashboard, the only page with the chart).
      document.dispatchEvent(new CustomEvent("cogworker:live-points", { detail: points }));
    }
    last = now;
  }

  // A region the operator is working in (a ticked box, a focused field) is left alone this time.
  function busy(region) {
    return region.querySelector("input[type=checkbox]:checked") || region.contains(document.activeElement);
  }

  function refresh() {
    fetch(location.href, { credentials: "same-origin", headers: { "X-Cogworker-Live": "1" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var fresh = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live][id]").forEach(function (region) {
          var next = fresh.getElementById(region.id);
          if (!next || busy(region)) return;
          region.innerHTML = next.innerHTML;
          Array.prototype.forEach.call(next.attributes, function (a) { region.setAttribute(a.name, a.value); });
          localTimes(region);
        });
        body.dataset.refreshed = String(Number(body.dataset.refreshed || 0) + 1);
        recordTotals();
      })
      .catch(function () { /* the next tick tries again */ });
  }

  function setLive(on) {
    var button = document.getElementById("live-toggle");
    if (timer) { clearInterval(timer); timer = null; }
    if (on) {
      timer = setInterval(refresh, interval() * 1000);
      localStorage.setItem(STORE_ON, "1");
    } else {
      localStorage.removeItem(STORE_ON);
    }
    if (button) button.setAttribute("aria-pressed", on ? "true" : "false");
    body.dataset.liveInterval = on ? String(interval()) : "";
  }

  function selectAll() {
    document.querySelectorAll("input[data-select-all]").forEach(function (box) {
      box.addEventListener("change", function () {
        var form = box.form;
        if (!form) return;
        form.querySelectorAll("input[type=checkbox][name=" + box.dataset.selectAll + "]").forEach(function (c) {
          c.checked = box.checked;
        });
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    selectAll();
    recordTotals();
    var select = document.getElementById("live-interval");
    if (select) {
      select.value = String(interval());
      select.addEventListener("change", function () {
        localStorage.setItem(STORE_INTERVAL, select.value);
        if (timer) setLive(true);
      });
    }
    var button = document.getElementById("live-toggle");
    if (button) {
      button.addEventListener("click", function () { setLive(!timer); });
    }
    setLive(localStorage.getItem(STORE_ON) === "1");
  });
})();
