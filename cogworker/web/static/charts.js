// The dashboard's Live chart: processed per poll, and failed per poll on a scale of its own, with
// value ticks (1, 2 or 5 × 10^n) and the polls' age on the time axis. app.js collects the points
// from each Live refresh and hands them over in a "cogworker:live-points" event; the server-drawn
// charts (web/charts.py) follow the same plan.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var MAX_POINTS = 60;

  function niceTicks(top, count) {
    top = top > 0 ? top : 1;
    var raw = top / count, mag = Math.pow(10, Math.floor(Math.log10(raw))), step = 10 * mag;
    [1, 2, 5, 10].some(function (m) { if (m * mag >= raw) { step = m * mag; return true; } return false; });
    step = Math.max(step, 1); // counts: no tick between 0 and 1
    var ticks = [];
    for (var v = 0; v < top + step - 1e-9; v += step) ticks.push(v);
    return ticks;
  }

  function label(v) {
    if (v >= 1e6) return +(v / 1e6).toPrecision(3) + "M";
    if (v >= 1e4) return +(v / 1e3).toPrecision(3) + "k";
    return v.toLocaleString("en-US");
  }

  function el(name, attrs, text) {
    var node = document.createElementNS(NS, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function plot(svg, values, ticks) {
    var box = svg.viewBox.baseVal, d = svg.dataset;
    var left = Number(d.left), right = Number(d.right), top = Number(d.top);
    var bottom = Number(d.bottom || box.height);
    var most = ticks[ticks.length - 1], step = (right - left) / MAX_POINTS;
    function y(v) { return bottom - ((bottom - top) * v) / most; }
    var axis = svg.querySelector(".y-axis");
    axis.textContent = "";
    ticks.forEach(function (t) {
      axis.appendChild(el("line", { "class": "grid", x1: left, x2: right, y1: y(t), y2: y(t) }));
      axis.appendChild(el("text", { "class": "y-label", x: left - 6, y: Math.min(y(t) + 4, bottom) }, label(t)));
    });
    var offset = MAX_POINTS - values.length;
    svg.querySelector("polyline").setAttribute("points", values.map(function (v, i) {
      return (left + (offset + i + 0.5) * step).toFixed(1) + "," + y(v).toFixed(1);
    }).join(" "));
    return { left: left, right: right, bottom: bottom, step: step };
  }

  function timeAxis(svg, geometry, seconds) {
    var axis = svg.querySelector(".x-axis");
    axis.textContent = "";
    for (var back = 0; back < MAX_POINTS; back += 10) {
      var x = geometry.left + (MAX_POINTS - back - 0.5) * geometry.step;
      axis.appendChild(el("line", { "class": "axis", x1: x, x2: x, y1: geometry.bottom, y2: geometry.bottom + 4 }));
      axis.appendChild(el("text", { "class": "x-label", x: x, y: geometry.bottom + 18 }, back ? "−" + back * seconds + " s" : "now"));
    }
    axis.appendChild(el("line", { "class": "axis", x1: geometry.left, x2: geometry.right, y1: geometry.bottom, y2: geometry.bottom }));
  }

  function table(points) {
    var body = document.querySelector("#live-table tbody");
    if (!body) return;
    body.textContent = "";
    for (var i = points.processed.length - 1; i >= 0; i--) {
      var row = document.createElement("tr");
      [points.times[i], points.processed[i], points.failed[i]].forEach(function (v, c) {
        var cell = document.createElement(c ? "td" : "th");
        if (c) cell.className = "num"; else cell.scope = "row";
        cell.textContent = c ? label(v) : v;
        row.appendChild(cell);
      });
      body.appendChild(row);
    }
  }

  var times = [];
  document.addEventListener("cogworker:live-points", function (event) {
    var points = event.detail, processed = document.getElementById("live-chart");
    var failed = document.getElementById("live-failed-chart");
    if (!processed || !failed) return;
    times.push(new Date().toISOString().slice(11, 19));
    times = times.slice(-points.processed.length);
    plot(processed, points.processed, niceTicks(Math.max.apply(null, points.processed), 3));
    var geometry = plot(failed, points.failed, niceTicks(Math.max.apply(null, points.failed), 2));
    timeAxis(failed, geometry, Number(document.body.dataset.liveInterval) || 5);
    table({ processed: points.processed, failed: points.failed, times: times });
    var status = document.getElementById("live-status");
    var last = points.processed.length - 1;
    if (status && last >= 0) {
      status.textContent = "last poll: " + points.processed[last] + " processed, " + points.failed[last] + " failed";
    }
  });
})();
