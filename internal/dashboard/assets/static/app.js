// Live throughput: the node's totals arrive as server-sent events from
// /stream every second; each chart keeps the last points of one rate and
// draws them on its canvas. No inline script: the page's CSP forbids it.
"use strict";

(function () {
  const charts = Array.from(document.querySelectorAll("canvas.chart"));
  if (charts.length === 0 || !window.EventSource) {
    return;
  }
  const maxPoints = 120;
  const series = new Map(charts.map((c) => [c, []]));

  function human(v) {
    const units = ["", "k", "M", "G", "T"];
    let i = 0;
    while (v >= 1000 && i < units.length - 1) {
      v /= 1000;
      i++;
    }
    return (i === 0 ? v.toFixed(v < 10 ? 1 : 0) : v.toFixed(1)) + units[i];
  }

  function draw(canvas) {
    const pts = series.get(canvas);
    const ctx = canvas.getContext("2d");
    const w = canvas.width, h = canvas.height, pad = 24;
    ctx.clearRect(0, 0, w, h);
    const peak = Math.max(1, ...pts);
    const top = peak * 1.15;
    ctx.strokeStyle = "#d9dee5";
    ctx.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const y = pad / 2 + (h - pad) * i / 4;
      ctx.beginPath();
      ctx.moveTo(0, y);
      ctx.lineTo(w, y);
      ctx.stroke();
    }
    ctx.fillStyle = "#66707d";
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillText("peak " + human(peak) + " " + canvas.dataset.unit, 4, 11);
    if (pts.length < 2) {
      return;
    }
    ctx.strokeStyle = "#2f9e8f";
    ctx.lineWidth = 2;
    ctx.beginPath();
    pts.forEach((v, i) => {
      const x = w * i / (maxPoints - 1);
      const y = pad / 2 + (h - pad) * (1 - v / top);
      if (i === 0) {
        ctx.moveTo(x, y);
      } else {
        ctx.lineTo(x, y);
      }
    });
    ctx.stroke();
  }

  const labels = { rps: document.getElementById("rate-records"), bps: document.getElementById("rate-bytes") };
  const es = new EventSource("/stream");
  es.onmessage = function (ev) {
    const s = JSON.parse(ev.data);
    for (const c of charts) {
      const field = c.dataset.field;
      const pts = series.get(c);
      pts.push(s[field] || 0);
      if (pts.length > maxPoints) {
        pts.shift();
      }
      c.dataset.points = String(pts.length);
      draw(c);
      if (labels[field]) {
        labels[field].textContent = human(s[field] || 0) + " " + c.dataset.unit;
      }
    }
  };
  es.addEventListener("failure", function () {
    for (const c of charts) {
      c.dataset.failed = "1";
    }
  });
  charts.forEach(draw);
})();
