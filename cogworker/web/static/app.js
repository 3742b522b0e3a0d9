// cogworker's Web UI: the UTC/local time switch, live refresh (keeping scroll and focus), the live
// chart's points, select-all boxes, and tables as labelled cards on a phone.
// Served as a file (the Content-Security-Policy allows no inline script), and nothing else is needed:
// every page works without it.
(function () {
  "use strict";

  var STORE_ON = "cogworker.live";
  var STORE_INTERVAL = "cogworker.liveInterval";
  var STORE_ZONE = "cogworker.timeZone"; // "local", or absent: UTC
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

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  // "2026-12-03 13:44:28": ISO-8601's order in the browser's zone, never a locale's 12/03 or 03/12.
  function localText(when) {
    return when.getFullYear() + "-" + pad(when.getMonth() + 1) + "-" + pad(when.getDate()) + " " +
      pad(when.getHours()) + ":" + pad(when.getMinutes()) + ":" + pad(when.getSeconds());
  }

  function offsetText(when) {
    var minutes = -when.getTimezoneOffset();
    var sign = minutes < 0 ? "-" : "+";
    minutes = Math.abs(minutes);
    return "UTC" + sign + pad(Math.floor(minutes / 60)) + ":" + pad(minutes % 60);
  }

  function zoneName() {
    try { return Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { return ""; }
  }

  function local() { return localStorage.getItem(STORE_ZONE) === "local"; }

  // A relative time ("3 min ago", drawn by the server) keeps its text; an absolute one is
  // rewritten in the browser's zone. The hover shows the exact time, in UTC as served or local
  // with its offset.
  function localTimes(root) {
    var inLocal = local();
    root.querySelectorAll("time[datetime] > span[title]").forEach(function (el) {
      if (!el.dataset.utc) { el.dataset.utc = el.title; el.dataset.text = el.textContent; }
      var when = new Date(el.parentNode.getAttribute("datetime"));
      if (!inLocal || isNaN(when.getTime())) {
        el.title = el.dataset.utc;
        el.textContent = el.dataset.text;
        return;
      }
      el.title = localText(when) + " " + offsetText(when);
      if (el.className === "at") el.textContent = localText(when);
    });
  }

  // The server wrote "3 min ago" as of drawing the page; a page left open keeps saying it truly by
  // counting on from then with the browser's clock (only the time elapsed, so a browser clock that is
  // off doesn't matter). The same words as render.py's `relative`.
  var drawnAt = Number(body.dataset.drawnAt) || Date.now() / 1000;
  var loadedAt = Date.now() / 1000;

  function relative(delta) {
    var span = Math.abs(delta), text;
    if (span < 1) return "now";
    if (span < 60) text = Math.floor(span) + " s";
    else if (span < 3600) text = Math.floor(span / 60) + " min";
    else if (span < 10 * 3600) {
      var minutes = Math.floor(span / 60);
      text = Math.floor(minutes / 60) + " h" + (minutes % 60 ? " " + (minutes % 60) + " min" : "");
    } else if (span < 48 * 3600) text = Math.floor(span / 3600) + " h";
    else text = Math.floor(span / 86400) + " days";
    return delta > 0 ? "in " + text : text + " ago";
  }

  function tick() {
    var now = drawnAt + (Date.now() / 1000 - loadedAt);
    document.querySelectorAll("time[datetime] > span.ago").forEach(function (el) {
      var when = Date.parse(el.parentNode.getAttribute("datetime")) / 1000;
      if (isNaN(when) || Math.abs(when - now) >= 60 * 86400) return;
      el.textContent = relative(when - now);
      el.dataset.text = el.textContent;
    });
  }

  function showZone() {
    var inLocal = local();
    var now = new Date();
    var said = inLocal ? "local time (" + (zoneName() ? zoneName() + ", " : "") + offsetText(now) + ")" : "UTC";
    var button = document.getElementById("time-zone");
    if (button) {
      button.hidden = false;
      button.textContent = inLocal ? "Local " + offsetText(now).slice(3) : "UTC";
      button.setAttribute("aria-pressed", inLocal ? "true" : "false");
      button.title = "Times on hover are in " + said + ": click for " + (inLocal ? "UTC" : "this browser's time zone");
    }
    var note = document.getElementById("time-note");
    if (note) note.textContent = "Times are in " + said + " (hover over one for the exact time).";
    body.dataset.timeZone = inLocal ? "local" : "utc";
    localTimes(document);
  }

  // On a phone a wide table becomes cards (app.css): each cell says its column, copied here from
  // the table's own headings so no template has to repeat them.
  function headingText(th) {
    var copy = th.cloneNode(true);
    copy.querySelectorAll("[aria-hidden=true]").forEach(function (el) { el.remove(); });
    return copy.textContent.trim();
  }

  function labelCells(root) {
    root.querySelectorAll("table").forEach(function (table) {
      if (!table.tHead || table.classList.contains("no-cards")) return;
      var heads = table.tHead.rows[table.tHead.rows.length - 1].cells;
      Array.prototype.forEach.call(table.tBodies, function (tbody) {
        Array.prototype.forEach.call(tbody.rows, function (row) {
          Array.prototype.forEach.call(row.cells, function (cell, i) {
            // A label the page wrote itself wins; a heading's decorations (a sort arrow) are
            // aria-hidden and left out, as a screen reader leaves them out.
            if (heads[i] && !cell.hasAttribute("data-label")) cell.dataset.label = headingText(heads[i]);
          });
        });
      });
      table.classList.add("cards");
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

  // A region the operator is working in (a ticked box, a field being typed in) is left alone this
  // time; any other is redrawn with its boxes' scroll and the focus put back as they were.
  function busy(region) {
    var active = document.activeElement;
    var typing = active && region.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName) &&
      active.type !== "checkbox" && active.type !== "submit" && active.type !== "button";
    return region.querySelector("input[type=checkbox]:checked") || typing;
  }

  var SCROLLERS = ".table-scroll, .table-wrap, .card, pre, [data-scroll]";

  function scrollers(region) {
    return [region].concat(Array.prototype.slice.call(region.querySelectorAll(SCROLLERS)));
  }

  // Where the focus is, as something the redrawn region has again: its id, else its form's
  // action with its name and value (a row's "Quiet" button), else its place among the focusables.
  function focusKey(region) {
    var el = document.activeElement;
    if (!el || el === body || !region.contains(el)) return null;
    var all = Array.prototype.slice.call(region.querySelectorAll("a[href], button, input, select, textarea"));
    var form = el.form;
    return {
      id: el.id,
      form: form ? form.getAttribute("action") + "|" + Array.prototype.map.call(form.elements, function (f) {
        return f.name + "=" + f.value;
      }).join("&") : null,
      tag: el.tagName,
      index: all.indexOf(el),
    };
  }

  function refocus(region, key) {
    if (!key) return;
    var found = key.id ? document.getElementById(key.id) : null;
    if (!found && key.form) {
      region.querySelectorAll("form").forEach(function (form) {
        var same = form.getAttribute("action") + "|" + Array.prototype.map.call(form.elements, function (f) {
          return f.name + "=" + f.value;
        }).join("&");
        if (!found && same === key.form) found = form.querySelector(key.tag.toLowerCase());
      });
    }
    if (!found && key.index >= 0) {
      found = region.querySelectorAll("a[href], button, input, select, textarea")[key.index] || null;
    }
    if (found) found.focus({ preventScroll: true });
  }

  function redraw(region, next) {
    var boxes = scrollers(region).map(function (el) { return [el.scrollLeft, el.scrollTop]; });
    var key = focusKey(region);
    var pageY = window.scrollY;
    region.innerHTML = next.innerHTML;
    Array.prototype.forEach.call(next.attributes, function (a) { region.setAttribute(a.name, a.value); });
    localTimes(region);
    labelCells(region);
    scrollers(region).forEach(function (el, i) {
      if (!boxes[i]) return;
      el.scrollLeft = boxes[i][0];
      el.scrollTop = boxes[i][1];
    });
    refocus(region, key);
    window.scrollTo(window.scrollX, pageY);
  }

  function refresh() {
    fetch(location.href, { credentials: "same-origin", headers: { "X-Cogworker-Live": "1" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var fresh = new DOMParser().parseFromString(html, "text/html");
        var drawn = Number(fresh.body.dataset.drawnAt);
        if (drawn) { drawnAt = drawn; loadedAt = Date.now() / 1000; }
        document.querySelectorAll("[data-live][id]").forEach(function (region) {
          var next = fresh.getElementById(region.id);
          if (!next || busy(region)) return;
          redraw(region, next);
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
    showZone();
    labelCells(document);
    setInterval(tick, 15000);
    selectAll();
    var zone = document.getElementById("time-zone");
    if (zone) {
      zone.addEventListener("click", function () {
        if (local()) localStorage.removeItem(STORE_ZONE); else localStorage.setItem(STORE_ZONE, "local");
        showZone();
      });
    }
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
