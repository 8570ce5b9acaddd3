"""The live page ``gyreflow run --ui`` serves: one HTML file whose only requests go to its own port.

It reads ``/api/job`` every second. It draws the execution graph as inline SVG: a box per cycle
titled with the task's name, inside it a box per chained vertex with a row per operator (its name as
``gyreflow explain`` prints it and its records in and out, updated live), ``×N`` when N tasks run
it, arrows for the edges. Below, the run's trends as charts drawn with uPlot (served from
``/static/``, shipped in the package): records/s and window duration, checkpoint duration and size,
the watermark lag of event-time jobs, each with a dashed line where the run rescaled or restarted.
"""

PAGE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>gyreflow</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/static/uPlot.min.css">
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d2330; background: #fafbfc; }
  h1 { font-size: 1.3em; margin: 0 0 .4em; }
  h2 { font-size: .95em; font-weight: 600; margin: 0 0 .4em; color: #3a4558; }
  .facts { display: flex; gap: 1em; flex-wrap: wrap; margin: .6em 0 1em; }
  .fact, .card { background: #fff; border: 1px solid #d8dee8; border-radius: 6px; }
  .fact { padding: .5em .9em; }
  .fact b { font-size: 1.3em; }
  .card { padding: .7em .9em; min-width: 0; }
  #state { font-weight: bold; text-transform: uppercase; }
  .running { color: #1f7a35; } .stopping { color: #a66a00; } .finished { color: #2754a8; }
  .failed { color: #b3261e; } .starting, .disconnected { color: #777; }
  #error { display: none; white-space: pre-wrap; background: #fdecea; border: 1px solid #e7a19b;
           color: #7a1711; padding: .8em; border-radius: 6px; font-family: monospace; }
  #graph-card { margin-bottom: 1em; overflow-x: auto; }
  svg text { font: 12px monospace; }
  .cycle > rect { fill: #f3f6fb; stroke: #9aa8bf; stroke-dasharray: 4 3; }
  .vertex > rect { fill: #e3ecfa; stroke: #3d5a8a; }
  .vertex .tasks { fill: #3d5a8a; font-weight: bold; }
  .operator .counts { font-size: 11px; fill: #4a5a75; }
  .operator line { stroke: #b8c6dc; }
  .edge text { font-size: 10px; fill: #5a6b87; }
  .charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(440px, 1fr)); gap: 1em; }
  .chart[hidden] { display: none; }
  .chart .note { color: #5a6b87; font-weight: normal; }
  .row { display: flex; gap: 1em; flex-wrap: wrap; margin-top: 1em; align-items: flex-start; }
  table { border-collapse: collapse; }
  td, th { border: 1px solid #d8dee8; padding: .2em .7em; text-align: right; }
  #events { margin: 0; padding-left: 1.2em; max-height: 16em; overflow-y: auto; }
  #events li { margin: .15em 0; }
  .rescale { color: #7a3fa6; } .rebalance { color: #1f6f8b; } .restart { color: #b3261e; }
</style>
</head>
<body>
<h1>gyreflow <span id="title"></span></h1>
<div class="facts">
  <div class="fact">state <span id="state" class="starting">connecting</span></div>
  <div class="fact"><b id="windows">0</b> windows</div>
  <div class="fact"><b id="throughput">0</b> records/s</div>
  <div class="fact">last checkpoint <b id="checkpoint">-</b></div>
  <div class="fact">watermark lag <b id="lag">-</b></div>
  <div class="fact"><b id="rescales" class="rescale">0</b> rescales</div>
  <div class="fact"><b id="rebalances" class="rebalance">0</b> rebalances</div>
  <div class="fact"><b id="restarts" class="restart">0</b> restarts</div>
</div>
<div id="error"></div>
<section class="card" id="graph-card">
  <h2>operators <span class="note">records in and out since the run started</span></h2>
  <svg id="graph" width="400" height="120" role="img" aria-label="execution graph"></svg>
</section>
<div class="charts" id="charts"></div>
<div class="row">
  <section class="card"><h2>last windows</h2>
    <table id="recent"><thead><tr><th>window</th><th>seconds</th><th>records</th></tr></thead>
    <tbody></tbody></table></section>
  <section class="card"><h2>rescales, rebalances and restarts</h2><ol id="events" reversed></ol>
    <span id="no-events">none yet</span></section>
</div>
<script src="/static/uPlot.iife.min.js"></script>
<script>
"use strict";
const NS = "http://www.w3.org/2000/svg";
const CHAR = 7.3, SMALL = 6.7, ROW = 20, GAP_X = 46, GAP_Y = 18, PAD = 16, TITLE = 22;
const COUNTS = "in 99.9k \u00b7 out 99.9k".length;  // numbers are at most 5 characters wide
const MARK = {rescale: "#7a3fa6", rebalance: "#1f6f8b", restart: "#b3261e"};
let drawn = "";
let operatorRows = new Map();  // operator name -> its <g> in the graph
let events = [];

// Numbers ------------------------------------------------------------------------------------

function trim(text) {
  return text.includes(".") && !text.includes("e") ? text.replace(/0+$/, "").replace(/\.$/, "") : text;
}

function compact(n) {  // 999, 1.23k, 12.3k, 123k, 1.23M: at most five characters
  if (n === null || n === undefined) return "-";
  const units = ["", "k", "M", "G", "T", "P"];
  let value = Math.abs(n), unit = 0;
  while (value >= 999.5 && unit < units.length - 1) { value /= 1000; unit++; }
  const digits = unit === 0 && Number.isInteger(value) ? 0 : value < 10 ? 2 : value < 100 ? 1 : 0;
  return (n < 0 ? "-" : "") + trim(value.toFixed(digits)) + units[unit];
}

function duration(s) {
  if (s === null || s === undefined) return "-";
  if (s === 0) return "0";
  if (s < 1e-3) return (s * 1e6).toFixed(0) + " \u00b5s";
  if (s < 1) return trim((s * 1e3).toPrecision(3)) + " ms";
  if (s < 120) return trim(s.toPrecision(3)) + " s";
  if (s < 7200) return trim((s / 60).toPrecision(3)) + " min";
  return trim((s / 3600).toFixed(1)) + " h";
}

function size(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "kB", "MB", "GB", "TB"];
  let value = n, unit = 0;
  while (value >= 999.5 && unit < units.length - 1) { value /= 1000; unit++; }
  return trim(value.toFixed(unit === 0 ? 0 : value < 10 ? 2 : 1)) + " " + units[unit];
}

// The operator graph -------------------------------------------------------------------------

function el(name, attrs, parent) {
  const node = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function draw(job) {
  const graph = job.execution_graph;
  const key = JSON.stringify([job.job, job.task, graph]);
  if (key === drawn) return;
  drawn = key;
  const svg = document.getElementById("graph");
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  operatorRows = new Map();
  const defs = el("defs", {}, svg);
  const marker = el("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
                               markerWidth: 7, markerHeight: 7, orient: "auto"}, defs);
  el("path", {d: "M0,0 L10,5 L0,10 z", fill: "#3d5a8a"}, marker);
  const byId = new Map(graph.vertices.map(v => [v.id, v]));
  const kinds = new Map(job.pipeline_graph.operators.map(o => [o.name, o.kind]));
  const feeds = new Set(job.pipeline_graph.edges.map(e => e.source));
  const depth = new Map();
  const inputs = new Map(graph.vertices.map(v => [v.id, []]));
  for (const e of graph.edges) if (inputs.has(e.target)) inputs.get(e.target).push(e.source);
  const depthOf = (id, seen) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id)) return 0;
    seen.add(id);
    const d = Math.max(-1, ...inputs.get(id).map(s => depthOf(s, seen))) + 1;
    depth.set(id, d);
    return d;
  };
  graph.vertices.forEach(v => depthOf(v.id, new Set()));
  const place = new Map();
  let top = PAD, width = 0;
  const cycles = graph.cycles.length ? graph.cycles : [{id: 0, vertices: graph.vertices.map(v => v.id)}];
  for (const cycle of cycles) {
    const columns = [];
    for (const id of cycle.vertices) {
      const d = depth.get(id) || 0;
      (columns[d] = columns[d] || []).push(byId.get(id));
    }
    const group = el("g", {class: "cycle", "data-cycle": cycle.id}, svg);
    const box = el("rect", {x: PAD, y: top, rx: 8}, group);
    const title = el("text", {x: PAD + 10, y: top + 16}, group);
    title.textContent = job.task + (cycles.length > 1 ? " \u00b7 cycle " + cycle.id : "");
    let x = PAD + 14, height = 0;
    for (const column of columns.filter(Boolean)) {
      const names = Math.max(...column.flatMap(v => v.operators.map(o => o.length)));
      const w = names * CHAR + COUNTS * SMALL + 44;
      let y = top + TITLE + 8;
      for (const v of column) {
        const h = v.operators.length * ROW + 12 + (v.parallelism > 1 ? 14 : 0);
        place.set(v.id, {x, y, w, h});
        const g = el("g", {class: "vertex", "data-vertex": v.id, "data-operators": v.operators.join(" "),
                           "data-parallelism": v.parallelism}, group);
        el("rect", {x, y, width: w, height: h, rx: 5}, g);
        let row = y + 6;
        if (v.parallelism > 1) {
          const tasks = el("text", {class: "tasks", x: x + w - 10, y: y + 15, "text-anchor": "end"}, g);
          tasks.textContent = "\u00d7" + v.parallelism + " tasks";
          row += 14;
        }
        v.operators.forEach((name, i) => {
          const op = el("g", {class: "operator", "data-operator": name, "data-kind": kinds.get(name) || "",
                              "data-shows-in": kinds.get(name) !== "source",
                              "data-shows-out": feeds.has(name)}, g);
          if (i > 0) el("line", {x1: x + 8, x2: x + w - 8, y1: row, y2: row}, op);
          el("title", {}, op);
          const label = el("text", {class: "name", x: x + 10, y: row + 14}, op);
          label.textContent = name;
          el("text", {class: "counts", x: x + w - 10, y: row + 14, "text-anchor": "end"}, op);
          operatorRows.set(name, op);
          row += ROW;
        });
        y += h + GAP_Y;
      }
      height = Math.max(height, y - GAP_Y - (top + TITLE + 8));
      x += w + GAP_X;
    }
    const h = TITLE + 16 + height;
    const w = Math.max(x - GAP_X + 14 - PAD, title.textContent.length * CHAR + 20);
    box.setAttribute("width", w);
    box.setAttribute("height", h);
    width = Math.max(width, PAD + w);
    top += h + PAD;
  }
  for (const e of graph.edges) {
    const a = place.get(e.source), b = place.get(e.target);
    if (!a || !b) continue;
    const g = el("g", {class: "edge"}, svg);
    const y1 = a.y + a.h / 2, y2 = b.y + b.h / 2;
    el("line", {x1: a.x + a.w, y1, x2: b.x, y2, stroke: "#3d5a8a", "marker-end": "url(#arrow)"}, g);
    const t = el("text", {x: (a.x + a.w + b.x) / 2, y: (y1 + y2) / 2 - 4, "text-anchor": "middle"}, g);
    t.textContent = e.partitioning;
  }
  svg.setAttribute("width", width + PAD);
  svg.setAttribute("height", top);
}

function count(job) {
  for (const o of job.operators) {
    const op = operatorRows.get(o.operator);
    if (o.pipeline !== job.job || o.task !== job.task || !op) continue;
    op.setAttribute("data-records-in", o.records_in);
    op.setAttribute("data-records-out", o.records_out);
    const parts = [];
    if (op.getAttribute("data-shows-in") === "true") parts.push("in " + compact(o.records_in));
    if (op.getAttribute("data-shows-out") === "true") parts.push("out " + compact(o.records_out));
    op.querySelector(".counts").textContent = parts.join(" \u00b7 ");
    op.querySelector("title").textContent = o.operator + ": " + o.records_in.toLocaleString("en")
        + " records in, " + o.records_out.toLocaleString("en") + " out";
  }
}

// The trends ---------------------------------------------------------------------------------

const CHARTS = [
  {id: "records", title: "records/s", trend: "windows", format: compact,
   series: [["records_per_second", "records/s", "#2754a8"]]},
  {id: "window-duration", title: "window duration", trend: "windows", format: duration,
   series: [["duration_seconds", "mean", "#1f7a35"], ["duration_max_seconds", "max", "#8cc49b"]]},
  {id: "checkpoint-duration", title: "checkpoint duration", trend: "checkpoints", format: duration,
   series: [["duration_seconds", "mean", "#a66a00"], ["duration_max_seconds", "max", "#e2c17e"]]},
  {id: "checkpoint-size", title: "checkpoint size", trend: "checkpoints", format: size,
   series: [["bytes", "mean", "#7a3fa6"], ["bytes_max", "max", "#c9a8e0"]]},
  {id: "watermark-lag", title: "watermark lag", trend: "windows", format: duration, eventTime: true,
   note: "wall clock minus the event-time watermark",
   series: [["watermark_lag_seconds", "lag", "#b3261e"]]},
];

function markers(card) {  // dashed lines where the run rescaled or restarted
  return {hooks: {draw: [u => {
    const ctx = u.ctx, {left, top, width, height} = u.bbox;
    let shown = 0;
    ctx.save();
    ctx.lineWidth = devicePixelRatio;
    ctx.setLineDash([5 * devicePixelRatio, 4 * devicePixelRatio]);
    ctx.font = (11 * devicePixelRatio) + "px system-ui, sans-serif";
    ctx.textAlign = "left";  // uPlot leaves the axes' alignment on the context
    ctx.textBaseline = "alphabetic";
    for (const e of events) {
      const x = Math.round(u.valToPos(e.time, "x", true));
      if (x < left - 1 || x > left + width + 1) continue;
      shown++;
      ctx.strokeStyle = MARK[e.kind] || "#555";
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      const right = x > left + width - 60 * devicePixelRatio;
      const textWidth = ctx.measureText(e.kind).width, gap = 4 * devicePixelRatio;
      const textX = right ? x - gap - textWidth : x + gap;
      ctx.fillStyle = "rgba(255, 255, 255, 0.85)";  // the label stays readable over the lines
      ctx.fillRect(textX - 2, top + 2 * devicePixelRatio, textWidth + 4, 13 * devicePixelRatio);
      ctx.fillStyle = MARK[e.kind] || "#555";
      ctx.fillText(e.kind, textX, top + 12 * devicePixelRatio);
    }
    ctx.restore();
    card.dataset.markers = shown;
  }]}};
}

function makeChart(spec) {
  const card = document.createElement("section");
  card.className = "card chart";
  card.id = "chart-" + spec.id;
  card.dataset.points = 0;
  card.dataset.markers = 0;
  const title = document.createElement("h2");
  title.textContent = spec.title;
  if (spec.note) {
    const note = document.createElement("span");
    note.className = "note";
    note.textContent = " " + spec.note;
    title.appendChild(note);
  }
  const plot = document.createElement("div");
  card.append(title, plot);
  document.getElementById("charts").appendChild(card);
  spec.card = card;
  spec.plot = plot;
  card.hidden = !!spec.eventTime;  // shown once the job has an event-time watermark
}

const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
                    43200, 86400, 172800, 604800, 1209600, 2592000, 7776000, 31536000];

function pad(n) {
  return String(n).padStart(2, "0");
}

function timeLabels(u, splits) {  // 14:05:10 within an hour, 14:05 within two days, else 11-26 14:05
  const range = u.scales.x.max - u.scales.x.min;
  return splits.map(t => {
    const d = new Date(t * 1000), hm = pad(d.getHours()) + ":" + pad(d.getMinutes());
    if (range > 2 * 86400) return pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + hm;
    return range > 3600 ? hm : hm + ":" + pad(d.getSeconds());
  });
}

function firstEventTime() {  // a rescale before the first trend point (a second's windows)
  return events.length ? events[0].time : null;
}

function lastEventTime() {
  return events.length ? events[events.length - 1].time : null;
}

function options(spec, width) {
  return {
    width, height: 170,
    cursor: {drag: {x: false, y: false}},
    scales: {x: {time: true, range: (u, min, max) => {  // every rescale and restart in sight
      const first = firstEventTime(), last = lastEventTime();
      min = first === null ? min : Math.min(min, first);
      max = last === null ? max : Math.max(max, last);
      return min === max ? [min - 1, max + 1] : [min, max];
    }},
             y: {range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1]}},  // from zero: sizes, not noise
    legend: spec.series.length > 1 ? {live: false} : {show: false},
    axes: [{stroke: "#5a6b87", grid: {stroke: "#eef1f6"}, space: 70, values: timeLabels,
            incrs: TIME_STEPS},
           {stroke: "#5a6b87", grid: {stroke: "#eef1f6"}, size: 64,
            values: (u, splits) => splits.map(spec.format)}],
    series: [{label: "time"}, ...spec.series.map(([, label, color], i) => ({
      label, stroke: color, width: i === 0 ? 2 : 1, value: (u, v) => spec.format(v),
      fill: i === 0 ? color + "14" : undefined, points: {show: false}}))],
    plugins: [markers(spec.card)],
  };
}

function plotWidth(spec) {
  return Math.max(300, spec.plot.clientWidth || spec.card.clientWidth - 30);
}

function chart(spec, trends) {
  const trend = trends[spec.trend];
  const data = [trend.time, ...spec.series.map(([column]) => trend[column])];
  if (spec.eventTime) {
    if (data[1].some(v => v !== null)) spec.card.hidden = false;
    if (spec.card.hidden) return;
  }
  spec.card.dataset.points = trend.time.length;
  if (!spec.uplot) {
    spec.uplot = new uPlot(options(spec, plotWidth(spec)), data, spec.plot);
  } else {
    spec.uplot.setData(data);
  }
}

CHARTS.forEach(makeChart);
window.addEventListener("resize", () => {
  for (const spec of CHARTS) if (spec.uplot) spec.uplot.setSize({width: plotWidth(spec), height: 170});
});

// The page -----------------------------------------------------------------------------------

function clock(time) {
  return new Date(time * 1000).toLocaleTimeString("en-GB");
}

function show(job) {
  document.getElementById("title").textContent = job.job ? job.job + "/" + job.task : "";
  const state = document.getElementById("state");
  state.textContent = job.state;
  state.className = job.state;
  document.getElementById("windows").textContent = job.windows_completed.toLocaleString("en");
  document.getElementById("throughput").textContent =
      Math.round(job.records_per_second).toLocaleString("en");
  const cps = job.recent_checkpoints;
  document.getElementById("checkpoint").textContent = cps.length
      ? duration(cps[cps.length - 1].duration_seconds) + ", " + size(cps[cps.length - 1].bytes) : "-";
  const lags = job.trends.windows.watermark_lag_seconds.filter(v => v !== null);
  document.getElementById("lag").textContent = lags.length ? duration(lags[lags.length - 1]) : "-";
  document.getElementById("rescales").textContent = job.rescales;
  document.getElementById("rebalances").textContent = job.rebalances;
  document.getElementById("restarts").textContent = job.restarts;
  const error = document.getElementById("error");
  error.style.display = job.error ? "block" : "none";
  error.textContent = job.error || "";
  const body = document.querySelector("#recent tbody");
  body.replaceChildren(...job.recent_windows.slice(-10).reverse().map(w => {
    const tr = document.createElement("tr");
    for (const value of [w.window, w.duration_seconds.toFixed(3), w.records]) {
      const td = document.createElement("td");
      td.textContent = value;
      tr.appendChild(td);
    }
    return tr;
  }));
  events = job.events;
  document.getElementById("no-events").hidden = events.length > 0;
  document.getElementById("events").replaceChildren(...events.slice().reverse().map(e => {
    const li = document.createElement("li");
    li.className = e.kind;
    li.textContent = clock(e.time) + " " + e.kind + " after window " + e.window
        + (e.detail ? ": " + e.detail : "");
    return li;
  }));
  draw(job);
  count(job);
  for (const spec of CHARTS) chart(spec, job.trends);
}

async function refresh() {
  try {
    const response = await fetch("/api/job", {cache: "no-store"});
    show(await response.json());
  } catch (e) {
    const state = document.getElementById("state");
    if (state.textContent !== "finished" && state.textContent !== "failed") {
      state.textContent = "disconnected";
      state.className = "disconnected";
    }
  }
}
refresh();
setInterval(refresh, 1000);
</script>
</body>
</html>
"""
