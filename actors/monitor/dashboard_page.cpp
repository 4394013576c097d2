// The dashboard page's source, kept in a raw string so the binary serves it as is.
#include "actors/monitor/dashboard_page.hpp"

namespace troupe::actors {

// One raw string: the page as the browser gets it.
// NOLINTNEXTLINE(readability-function-size)
const char* dashboard_html() {
  return R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>troupe monitor</title>
<link rel="icon" href="data:,">
<style>
  body { font-family: sans-serif; margin: 16px; background: #fafafa; color: #222; }
  h1 { font-size: 18px; margin: 0 0 4px 0; }
  #run, #status { font-size: 13px; color: #555; margin-bottom: 4px; }
  .grid { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 12px; margin-top: 10px; }
  .panel { background: white; border: 1px solid #ddd; border-radius: 4px; padding: 8px; }
  .panel h2 { font-size: 14px; margin: 0 0 6px 0; }
  .wide { grid-column: 1 / span 2; }
  canvas { width: 100%; display: block; }
  #errors { color: #b00; font-size: 12px; white-space: pre-wrap; }
  .legend span { font-size: 12px; margin-right: 12px; }
</style>
</head>
<body>
<h1>troupe monitor</h1>
<div id="run">waiting for the run ...</div>
<div id="status"></div>
<pre id="errors" data-count="0"></pre>
<div class="grid">
  <div class="panel"><h2>lm loss</h2><canvas id="chart-loss" data-points="0" width="600" height="220"></canvas></div>
  <div class="panel"><h2>throughput (tokens/s)</h2><canvas id="chart-throughput" data-points="0" width="600" height="220"></canvas></div>
  <div class="panel"><h2>memory (GiB)</h2><canvas id="chart-memory" data-points="0" width="600" height="220"></canvas>
    <div class="legend" id="legend-memory"></div></div>
  <div class="panel"><h2>stage time, latest traced iteration</h2><canvas id="chart-stages" data-points="0" width="600" height="220"></canvas>
    <div class="legend" id="legend-stages"></div></div>
  <div class="panel wide"><h2 id="timeline-title">pipeline timeline</h2>
    <canvas id="chart-timeline" data-points="0" width="1240" height="200"></canvas>
    <div class="legend"><span style="color:#3b6fb6">&#9632; forward</span><span style="color:#3f8f3a">&#9632; backward</span>
      <span style="color:#b0b0b0">&#9632; transfer / other</span></div></div>
</div>
<script>
"use strict";
// Errors show on the page (and in its DOM, for tests) instead of only in a console.
const errorBox = document.getElementById("errors");
function reportError(text) {
  errorBox.textContent += text + "\n";
  errorBox.dataset.count = String(Number(errorBox.dataset.count) + 1);
}
window.onerror = (message, source, line) => { reportError("error: " + message + " (line " + line + ")"); };
window.addEventListener("unhandledrejection", (e) => { reportError("unhandled rejection: " + e.reason); });
const consoleError = console.error.bind(console);
console.error = (...args) => { reportError("console.error: " + args.join(" ")); consoleError(...args); };

const COLORS = ["#3b6fb6", "#d9822b", "#3f8f3a", "#b63b6f", "#6f3bb6", "#2bb6a8", "#8a8a2b", "#555555"];
const STATES = [["busy", "#3b6fb6"], ["communication", "#d9822b"], ["data", "#8a8a2b"],
                ["checkpoint", "#b63b6f"], ["optimizer", "#6f3bb6"], ["idle", "#d8d8d8"]];

function formatNumber(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(2) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(2) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
  if (a >= 100) return v.toFixed(0);
  return v.toPrecision(4);
}

// "3d04h", "1h02m", "12m03s", "45s", as troupe monitor writes them.
function formatDuration(seconds) {
  if (!isFinite(seconds) || seconds < 0) return "?";
  const s = Math.round(seconds), pad = (n) => String(n).padStart(2, "0");
  if (s >= 86400) return Math.floor(s / 86400) + "d" + pad(Math.floor(s % 86400 / 3600)) + "h";
  if (s >= 3600) return Math.floor(s / 3600) + "h" + pad(Math.floor(s % 3600 / 60)) + "m";
  if (s >= 60) return Math.floor(s / 60) + "m" + pad(s % 60) + "s";
  return s + "s";
}

// Lines of [x, y] points (null y skipped) on a canvas, with the y range and the x ends labelled.
function lineChart(canvas, series) {
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, left = 60, right = 10, top = 10, bottom = 24;
  ctx.clearRect(0, 0, w, h);
  let points = 0, x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (const s of series)
    for (const [x, y] of s.points) {
      if (y === null || !isFinite(y)) continue;
      x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
    }
  ctx.strokeStyle = "#999"; ctx.fillStyle = "#555"; ctx.font = "11px sans-serif";
  ctx.beginPath(); ctx.moveTo(left, top); ctx.lineTo(left, h - bottom); ctx.lineTo(w - right, h - bottom); ctx.stroke();
  if (!isFinite(x0)) { ctx.fillText("no data yet", left + 10, top + 20); canvas.dataset.points = "0"; return; }
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { y0 -= Math.abs(y0) * 0.05 + 1e-9; y1 += Math.abs(y1) * 0.05 + 1e-9; }
  const px = (x) => left + (w - left - right) * (x - x0) / (x1 - x0);
  const py = (y) => h - bottom - (h - top - bottom) * (y - y0) / (y1 - y0);
  ctx.textAlign = "right";
  ctx.fillText(formatNumber(y1), left - 4, top + 8);
  ctx.fillText(formatNumber(y0), left - 4, h - bottom);
  ctx.textAlign = "left"; ctx.fillText(String(x0), left, h - 8);
  ctx.textAlign = "right"; ctx.fillText(String(x1), w - right, h - 8);
  series.forEach((s, i) => {
    ctx.strokeStyle = s.color || COLORS[i % COLORS.length]; ctx.lineWidth = 1.5; ctx.beginPath();
    let drawing = false;
    for (const [x, y] of s.points) {
      if (y === null || !isFinite(y)) { drawing = false; continue; }
      if (drawing) ctx.lineTo(px(x), py(y)); else ctx.moveTo(px(x), py(y));
      drawing = true; ++points;
      ctx.fillStyle = ctx.strokeStyle; ctx.fillRect(px(x) - 1.5, py(y) - 1.5, 3, 3);
    }
    ctx.stroke();
  });
  canvas.dataset.points = String(points);
}

function drawMemory(iterations) {
  const gib = 1024 * 1024 * 1024, series = [], legend = [];
  const devices = iterations.reduce((n, it) => Math.max(n, it.memory_bytes.length), 0);
  for (let d = 0; d < devices; ++d) {
    series.push({points: iterations.map((it) => [it.iteration, d < it.memory_bytes.length ? it.memory_bytes[d] / gib : null])});
    legend.push("GPU " + d);
  }
  if (iterations.some((it) => it.host_memory_bytes > 0)) {
    series.push({points: iterations.map((it) => [it.iteration, it.host_memory_bytes > 0 ? it.host_memory_bytes / gib : null])});
    legend.push("host (resident)");
  }
  lineChart(document.getElementById("chart-memory"), series);
  document.getElementById("legend-memory").innerHTML =
      legend.map((name, i) => '<span style="color:' + COLORS[i % COLORS.length] + '">&#9632; ' + name + "</span>").join("");
}

// Stacked bars: each stage's time of the latest breakdown, by state.
function drawStages(stages) {
  const canvas = document.getElementById("chart-stages"), ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, left = 60, right = 10;
  ctx.clearRect(0, 0, w, h);
  ctx.font = "11px sans-serif";
  document.getElementById("legend-stages").innerHTML =
      STATES.map(([name, color]) => '<span style="color:' + color + '">&#9632; ' + name + "</span>").join("");
  if (stages.length === 0) { ctx.fillStyle = "#555"; ctx.fillText("no trace yet", left + 10, 30); canvas.dataset.points = "0"; return; }
  const s = stages[stages.length - 1], n = s.busy_ns.length, span = Math.max(s.end_ns - s.start_ns, 1);
  const row = Math.min(40, (h - 20) / Math.max(n, 1));
  let boxes = 0;
  for (let st = 0; st < n; ++st) {
    let x = left;
    const y = 10 + st * row;
    ctx.fillStyle = "#555"; ctx.textAlign = "right"; ctx.fillText("stage " + st, left - 4, y + row * 0.6);
    for (const [name, color] of STATES) {
      const width = (w - left - right) * s[name + "_ns"][st] / span;
      ctx.fillStyle = color; ctx.fillRect(x, y, width, row - 6);
      if (width > 34) {
        ctx.fillStyle = name === "idle" ? "#333" : "white"; ctx.textAlign = "center";
        ctx.fillText((100 * s[name + "_ns"][st] / span).toFixed(0) + "%", x + width / 2, y + row * 0.5);
      }
      x += width; ++boxes;
    }
  }
  canvas.dataset.points = String(boxes);
}

// A row per stage over the latest traced iterations (one clock), a box per op.
function drawTimeline(timeline) {
  const canvas = document.getElementById("chart-timeline"), ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, left = 60, right = 10, top = 6, bottom = 20;
  ctx.clearRect(0, 0, w, h);
  ctx.font = "11px sans-serif";
  if (timeline.length === 0) { ctx.fillStyle = "#555"; ctx.fillText("no trace yet", left + 10, 30); canvas.dataset.points = "0"; return; }
  const t0 = Math.min(...timeline.map((t) => t.start_ns)), t1 = Math.max(...timeline.map((t) => t.end_ns));
  let stages = 1;
  for (const t of timeline) for (const op of t.ops) stages = Math.max(stages, op[0] + 1);
  const row = (h - top - bottom) / stages, span = Math.max(t1 - t0, 1);
  const px = (t) => left + (w - left - right) * (t - t0) / span;
  let boxes = 0;
  for (let s = 0; s < stages; ++s) {
    ctx.fillStyle = "#555"; ctx.textAlign = "right"; ctx.fillText("stage " + s, left - 4, top + s * row + row * 0.6);
  }
  for (const t of timeline) {
    ctx.strokeStyle = "#ccc"; ctx.beginPath(); ctx.moveTo(px(t.start_ns), top); ctx.lineTo(px(t.start_ns), h - bottom); ctx.stroke();
    ctx.fillStyle = "#555"; ctx.textAlign = "left"; ctx.fillText("it " + t.iteration, px(t.start_ns) + 2, h - 6);
    for (const [stage, kind, microbatch, chunk, start, end] of t.ops) {
      const light = Math.min(chunk, 3) * 12;
      ctx.fillStyle = kind === 0 ? "hsl(214, 51%, " + (47 + light) + "%)" : kind === 1 ? "hsl(116, 42%, " + (39 + light) + "%)" : "#b0b0b0";
      const x = px(start), width = Math.max(px(end) - x, 0.7), y = top + stage * row + (kind >= 2 ? row * 0.7 : 0);
      ctx.fillRect(x, y, width, kind >= 2 ? row * 0.2 : row * 0.65);
      if (width > 14 && kind < 2 && microbatch >= 0) {
        ctx.fillStyle = "white"; ctx.textAlign = "center"; ctx.fillText(String(microbatch), x + width / 2, y + row * 0.45);
      }
      ++boxes;
    }
  }
  document.getElementById("timeline-title").textContent = "pipeline timeline, iterations " + timeline[0].iteration +
      "-" + timeline[timeline.length - 1].iteration + " (" + (span / 1e6).toFixed(1) + " ms)";
  canvas.dataset.points = String(boxes);
}

function render(h) {
  const it = h.iterations, last = it.length ? it[it.length - 1] : null;
  if (h.hello)
    document.getElementById("run").textContent = h.hello.model + ", " + (h.hello.parameters / 1e6).toFixed(2) +
        "M parameters, " + h.hello.device_count + " " + h.hello.device_kind + " devices: tensor " + h.hello.tensor_parallel +
        " x pipeline " + h.hello.pipeline_parallel + " (" + h.hello.schedule + ") x data " + h.hello.data_parallel +
        " | run " + h.hello.run_id;
  let status = "waiting for the first log line";
  if (last) {
    const left = Math.max(last.train_iters - last.iteration, 0) * last.elapsed_ms_per_iteration / 1e3;
    status = "iteration " + last.iteration + " / " + last.train_iters + " (" +
        (100 * last.iteration / Math.max(last.train_iters, 1)).toFixed(1) + "%, ETA " + formatDuration(left) +
        ") | lm loss " + (last.lm_loss === null ? "nan" : last.lm_loss.toExponential(4)) + " | " +
        formatNumber(last.tokens_per_second) + " tokens/s";
  }
  const valid = h.validations.length ? h.validations[h.validations.length - 1] : null;
  if (valid)
    status += " | validation at " + valid.iteration + ": " + (valid.lm_loss === null ? "nan" : valid.lm_loss.toExponential(4));
  if (h.end) status += " | run ended: " + h.end.reason;
  status += " | trace events " + h.trace_events + " (dropped " + h.dropped_trace_events + ")";
  document.getElementById("status").textContent = status;
  lineChart(document.getElementById("chart-loss"), [
    {points: it.map((r) => [r.iteration, r.lm_loss])},
    {points: h.validations.map((v) => [v.iteration, v.lm_loss]), color: "#d9822b"}]);
  lineChart(document.getElementById("chart-throughput"), [{points: it.map((r) => [r.iteration, r.tokens_per_second])}]);
  drawMemory(it);
  drawStages(h.stages);
  drawTimeline(h.timeline);
  document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
}

async function poll() {
  setTimeout(poll, 1000);
  let history = null;
  try {
    const response = await fetch("/api/history", {cache: "no-store"});
    if (!response.ok) throw new Error("HTTP " + response.status);
    history = await response.json();
  } catch (e) {
    // A run that ended (its server gone) is not a page error: say so and keep trying.
    document.getElementById("status").textContent = "cannot reach the run (" + e.message + "); retrying";
  }
  if (history) render(history);  // a bug in drawing is a page error (an unhandled rejection)
}
poll();
</script>
</body>
</html>
)html";
}

}  // namespace troupe::actors
