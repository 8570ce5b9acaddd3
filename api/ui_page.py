"""The live page ``gyreflow run --ui`` serves: one self-contained HTML file (no request leaves its port).

It reads ``/api/job`` every second and draws the execution graph as inline SVG: a box per cycle
titled with the task's name, inside it a box per chained vertex labelled with its operators' names as
``gyreflow explain`` prints them (and ``×N`` when N tasks run it), arrows for the edges.
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>gyreflow</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d2330; background: #fafbfc; }
  h1 { font-size: 1.3em; margin: 0 0 .4em; }
  .facts { display: flex; gap: 1.5em; flex-wrap: wrap; margin: .6em 0 1em; }
  .fact { background: #fff; border: 1px solid #d8dee8; border-radius: 6px; padding: .5em .9em; }
  .fact b { font-size: 1.3em; }
  #state { font-weight: bold; text-transform: uppercase; }
  .running { color: #1f7a35; } .stopping { color: #a66a00; } .finished { color: #2754a8; }
  .failed { color: #b3261e; } .starting, .disconnected { color: #777; }
  #error { display: none; white-space: pre-wrap; background: #fdecea; border: 1px solid #e7a19b;
           color: #7a1711; padding: .8em; border-radius: 6px; font-family: monospace; }
  svg { background: #fff; border: 1px solid #d8dee8; border-radius: 6px; }
  svg text { font: 12px monospace; }
  .cycle > rect { fill: #f3f6fb; stroke: #9aa8bf; stroke-dasharray: 4 3; }
  .vertex rect { fill: #e3ecfa; stroke: #3d5a8a; }
  .edge text { font-size: 10px; fill: #5a6b87; }
  table { border-collapse: collapse; margin-top: 1em; background: #fff; }
  td, th { border: 1px solid #d8dee8; padding: .2em .7em; text-align: right; }
</style>
</head>
<body>
<h1>gyreflow <span id="title"></span></h1>
<div class="facts">
  <div class="fact">state <span id="state" class="starting">connecting</span></div>
  <div class="fact"><b id="windows">0</b> windows</div>
  <div class="fact"><b id="throughput">0</b> records/s</div>
  <div class="fact">last checkpoint <b id="checkpoint">-</b></div>
</div>
<div id="error"></div>
<svg id="graph" width="400" height="120" role="img" aria-label="execution graph"></svg>
<table id="recent"><thead><tr><th>window</th><th>seconds</th><th>records</th></tr></thead>
<tbody></tbody></table>
<script>
"use strict";
const NS = "http://www.w3.org/2000/svg";
const CHAR = 7.3, BOX_H = 34, GAP_X = 46, GAP_Y = 18, PAD = 16, TITLE = 22;
let drawn = "";

function el(name, attrs, parent) {
  const node = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function label(vertex) {
  const text = vertex.operators.join(" \\u2192 ");
  return vertex.parallelism > 1 ? text + " \\u00d7" + vertex.parallelism : text;
}

function draw(job) {
  const graph = job.execution_graph;
  const key = JSON.stringify([job.task, graph]);
  if (key === drawn) return;
  drawn = key;
  const svg = document.getElementById("graph");
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const defs = el("defs", {}, svg);
  const marker = el("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
                               markerWidth: 7, markerHeight: 7, orient: "auto"}, defs);
  el("path", {d: "M0,0 L10,5 L0,10 z", fill: "#3d5a8a"}, marker);
  const byId = new Map(graph.vertices.map(v => [v.id, v]));
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
    title.textContent = job.task + (cycles.length > 1 ? " \\u00b7 cycle " + cycle.id : "");
    let x = PAD + 14, rows = 0;
    for (const column of columns.filter(Boolean)) {
      const w = Math.max(...column.map(v => label(v).length)) * CHAR + 20;
      column.forEach((v, row) => {
        const y = top + TITLE + 8 + row * (BOX_H + GAP_Y);
        place.set(v.id, {x, y, w});
        const g = el("g", {class: "vertex", "data-vertex": v.id,
                           "data-operators": v.operators.join(" "),
                           "data-parallelism": v.parallelism}, group);
        el("rect", {x, y, width: w, height: BOX_H, rx: 5}, g);
        const t = el("text", {x: x + 10, y: y + 21}, g);
        t.textContent = label(v);
      });
      rows = Math.max(rows, column.length);
      x += w + GAP_X;
    }
    const h = TITLE + 16 + rows * (BOX_H + GAP_Y) - GAP_Y;
    const w = x - GAP_X + 14 - PAD;
    box.setAttribute("width", Math.max(w, title.textContent.length * CHAR + 20));
    box.setAttribute("height", h);
    width = Math.max(width, PAD + Math.max(w, title.textContent.length * CHAR + 20));
    top += h + PAD;
  }
  for (const e of graph.edges) {
    const a = place.get(e.source), b = place.get(e.target);
    if (!a || !b) continue;
    const g = el("g", {class: "edge"}, svg);
    const y1 = a.y + BOX_H / 2, y2 = b.y + BOX_H / 2;
    el("line", {x1: a.x + a.w, y1, x2: b.x, y2, stroke: "#3d5a8a", "marker-end": "url(#arrow)"}, g);
    const t = el("text", {x: (a.x + a.w + b.x) / 2, y: (y1 + y2) / 2 - 4, "text-anchor": "middle"}, g);
    t.textContent = e.partitioning;
  }
  svg.setAttribute("width", width + PAD);
  svg.setAttribute("height", top);
}

function show(job) {
  document.getElementById("title").textContent = job.job ? job.job + "/" + job.task : "";
  const state = document.getElementById("state");
  state.textContent = job.state;
  state.className = job.state;
  document.getElementById("windows").textContent = job.windows_completed;
  document.getElementById("throughput").textContent =
      Math.round(job.records_per_second).toLocaleString("en");
  const cps = job.recent_checkpoints;
  document.getElementById("checkpoint").textContent = cps.length
      ? (cps[cps.length - 1].duration_seconds * 1000).toFixed(1) + " ms, "
        + cps[cps.length - 1].bytes.toLocaleString("en") + " bytes" : "-";
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
  draw(job);
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
