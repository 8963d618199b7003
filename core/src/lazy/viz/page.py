"""The viewer page: one self-contained HTML document (inline CSS and JavaScript, nothing fetched but `trace.json` from
the server that serves it). It lists the realizes and their kernels, draws a realize's LazyBuffer graph as SVG (nodes
coloured by the kernel they fused into) and shows a kernel's AST, optimisations, UOps, source and times."""

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>lazy viz</title>
<style>
:root {
  --fg: #1d2430; --muted: #5f6b7a; --line: #d5dbe3; --panel: #f5f7fa; --sel: #1d4ed8; --selbg: #dbe7ff;
  --mono: ui-monospace, "SFMono-Regular", "DejaVu Sans Mono", Menlo, Consolas, monospace;
}
* { box-sizing: border-box; }
html, body { margin: 0; height: 100%; }
body {
  font: 13px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--fg);
  display: grid; grid-template-rows: 36px minmax(0, 1fr); grid-template-columns: 270px minmax(0, 1fr);
  height: 100vh; overflow: hidden;
}
header {
  grid-column: 1 / 3; display: flex; align-items: center; gap: 14px; padding: 0 12px;
  background: #1d2430; color: #fff;
}
header .brand { font-weight: 700; letter-spacing: .02em; }
header .meta { color: #c3cad6; flex: 1; min-width: 0; overflow: hidden; white-space: nowrap; text-overflow: ellipsis; }
header button {
  background: #334155; color: #fff; border: 1px solid #475569; border-radius: 4px; padding: 2px 9px; font: inherit;
  cursor: pointer;
}
nav#list { overflow: auto; background: var(--panel); border-right: 1px solid var(--line); padding-bottom: 24px; }
.rhead {
  position: sticky; top: 0; z-index: 1; padding: 6px 10px 4px; background: #e8ecf2;
  border-bottom: 1px solid var(--line); cursor: pointer; display: flex; gap: 6px; align-items: baseline;
  white-space: nowrap;
}
.rhead.current { background: #d3ddec; }
.rhead .rnum { font-weight: 700; }
.rhead .rsite { color: var(--muted); overflow: hidden; text-overflow: ellipsis; flex: 1; min-width: 0; }
.rhead .rtime { color: var(--muted); font-variant-numeric: tabular-nums; }
.kitem {
  display: flex; width: 100%; gap: 7px; align-items: center; padding: 3px 10px 3px 16px; border: 0;
  border-left: 3px solid transparent; background: none; font: inherit; color: inherit; text-align: left;
  cursor: pointer;
}
.kitem:hover { background: #e9eef6; }
.kitem.selected { background: var(--selbg); border-left-color: var(--sel); }
.kitem:focus-visible { outline: 2px solid var(--sel); outline-offset: -2px; }
.kitem .sw { flex: none; width: 11px; height: 11px; border-radius: 3px; border: 1px solid; }
.kitem .kname {
  font-family: var(--mono); font-size: 12px; flex: 1; min-width: 0; overflow: hidden; text-overflow: ellipsis;
  white-space: nowrap;
}
.kitem .ktime { color: var(--muted); font-variant-numeric: tabular-nums; white-space: nowrap; }
.kitem[data-kind="copy"] .kname, .kitem[data-kind="empty"] .kname, .kitem[data-kind="view"] .kname { color: #6b4f1d; }
main { display: grid; grid-template-rows: minmax(150px, 42%) minmax(0, 1fr); min-width: 0; min-height: 0; }
#graphbox { position: relative; border-bottom: 1px solid var(--line); min-height: 0; overflow: hidden; }
svg#graph { width: 100%; height: 100%; display: block; background: #fbfcfd; cursor: grab; user-select: none; }
svg#graph.dragging { cursor: grabbing; }
.legend {
  position: absolute; left: 8px; bottom: 6px; font-size: 11px; color: var(--muted); background: rgba(255,255,255,.85);
  padding: 2px 6px; border-radius: 4px; pointer-events: none;
}
#hover {
  position: absolute; right: 8px; top: 6px; max-width: 55%; font-size: 12px; background: rgba(255,255,255,.94);
  border: 1px solid var(--line); border-radius: 4px; padding: 3px 7px; white-space: pre-wrap; pointer-events: none;
}
#hover:empty { display: none; }
.node { cursor: pointer; }
.node rect { stroke-width: 1.2; }
.node text { font-size: 11px; fill: #111827; pointer-events: none; }
.node text.sub { font-size: 10px; fill: #475569; }
.node.mem rect { stroke-width: 2.6; }
.node.input rect { fill: #eef0f3; stroke: #6b7280; stroke-dasharray: 4 2; }
.node.dim { opacity: .38; }
.node.in rect { stroke: var(--sel); stroke-width: 3; }
.node.picked rect { stroke: #dc2626; stroke-width: 3; }
.edge { fill: none; stroke: #9aa4b2; stroke-width: 1.2; }
.edge.view { stroke-dasharray: 5 3; }
.edge.in { stroke: var(--sel); stroke-width: 1.8; }
.edge.dim { opacity: .3; }
#details { display: grid; grid-template-rows: auto auto minmax(0, 1fr); min-height: 0; }
.khead { padding: 6px 12px; display: flex; flex-wrap: wrap; gap: 4px 16px; align-items: baseline; }
.khead .kt { font: 600 14px var(--mono); }
.khead .kv { color: var(--muted); }
.tabs { display: flex; gap: 2px; padding: 0 8px; border-bottom: 1px solid var(--line); }
.tabs button {
  border: 1px solid transparent; border-bottom: 0; background: none; padding: 5px 12px; border-radius: 6px 6px 0 0;
  font: inherit; color: var(--muted); cursor: pointer; margin-bottom: -1px;
}
.tabs button[aria-selected="true"] { background: #fff; border-color: var(--line); color: var(--fg); font-weight: 600; }
.tabs button .key { font-size: 10px; color: #94a3b8; margin-left: 4px; }
pre#panel { margin: 0; padding: 8px 12px; overflow: auto; font: 12px/1.45 var(--mono); white-space: pre; tab-size: 4; }
#help {
  position: fixed; inset: 0; background: rgba(15,23,42,.45); display: none; align-items: center;
  justify-content: center; z-index: 10;
}
#help.open { display: flex; }
#help .box {
  background: #fff; border-radius: 8px; padding: 16px 22px; max-width: 560px; box-shadow: 0 10px 40px #0005;
}
#help h2 { margin: 0 0 8px; font-size: 16px; }
#help table { border-collapse: collapse; }
#help td { padding: 2px 12px 2px 0; vertical-align: top; }
kbd {
  font: 11px var(--mono); background: #f1f5f9; border: 1px solid #cbd5e1; border-bottom-width: 2px; border-radius: 3px;
  padding: 0 4px;
}
.error { padding: 20px; color: #b91c1c; font-size: 14px; white-space: pre-wrap; }
</style>
</head>
<body>
<header>
  <span class="brand">lazy viz</span>
  <span class="meta" id="meta">loading trace.json ...</span>
  <button id="helpbtn" title="keyboard shortcuts (?)">? help</button>
</header>
<nav id="list" aria-label="realizes and kernels"></nav>
<main>
  <div id="graphbox">
    <svg id="graph" role="img" aria-label="LazyBuffer graph of the selected realize">
      <defs>
        <marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" orient="auto">
          <path d="M0,0 L8,4 L0,8 z" fill="#9aa4b2"></path>
        </marker>
      </defs>
      <g id="vp"></g>
    </svg>
    <div class="legend">fill: the kernel a node fused into &middot; thick border: gets memory &middot;
      grey dashed: already in memory &middot; dashed edge: read through a view &middot; drag to pan, wheel to zoom</div>
    <div id="hover"></div>
  </div>
  <section id="details">
    <div class="khead" id="khead"></div>
    <div class="tabs" role="tablist" id="tabs"></div>
    <pre id="panel" role="tabpanel" tabindex="0"></pre>
  </section>
</main>
<div id="help" role="dialog" aria-label="keyboard shortcuts">
  <div class="box">
    <h2>Keyboard</h2>
    <table>
      <tr><td><kbd>j</kbd> <kbd>&darr;</kbd> / <kbd>k</kbd> <kbd>&uarr;</kbd></td><td>next / previous kernel</td></tr>
      <tr><td><kbd>n</kbd> / <kbd>p</kbd></td><td>next / previous realize</td></tr>
      <tr><td><kbd>l</kbd> <kbd>&rarr;</kbd> / <kbd>h</kbd> <kbd>&larr;</kbd></td><td>next / previous tab</td></tr>
      <tr><td><kbd>1</kbd> &ndash; <kbd>5</kbd></td><td>tab: AST, Opts, UOps, Source, Node</td></tr>
      <tr><td><kbd>f</kbd> &middot; <kbd>+</kbd> <kbd>-</kbd></td><td>fit the graph &middot; zoom in, out</td></tr>
      <tr><td><kbd>?</kbd> &middot; <kbd>Esc</kbd></td><td>this help &middot; close it</td></tr>
    </table>
    <p>Mouse: click a kernel in the list or a node in the graph (its details go to the Node tab); drag the graph to
      pan, scroll to zoom. Hover a node for why it got memory.</p>
  </div>
</div>
<script>
"use strict";
const TABS = [["ast", "AST"], ["opts", "Opts"], ["uops", "UOps"], ["source", "Source"], ["node", "Node"]];
const NODE_W = 140, NODE_H = 34, GAP_X = 46, GAP_Y = 14;
const READABLE = 0.85;  // the smallest zoom a graph is first drawn at: a wider one starts at its first kernel
const state = { trace: null, flat: [], cur: -1, shown: -1, tab: "source", node: -1, graph: null,
                view: { x: 0, y: 0, k: 1 } };
const $ = (id) => document.getElementById(id);
const SVGNS = "http://www.w3.org/2000/svg";

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const kid of kids) e.append(kid);
  return e;
}
function sv(tag, attrs) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}
function fmtTime(s) {
  if (s === null || s === undefined) return "";
  const ms = s * 1e3;
  if (ms >= 100) return ms.toFixed(0) + " ms";
  if (ms >= 1) return ms.toFixed(2) + " ms";
  return (ms * 1e3).toFixed(1) + " \u00b5s";
}
function fmtBytes(n) {
  if (n >= 1 << 30) return (n / (1 << 30)).toFixed(1) + " GiB";
  if (n >= 1 << 20) return (n / (1 << 20)).toFixed(1) + " MiB";
  return n >= 1024 ? (n / 1024).toFixed(1) + " KiB" : n + " B";
}
function mean(a) { return a && a.length ? a.reduce((x, y) => x + y, 0) / a.length : null; }
function color(j, dark) {
  const h = (j * 137.508 + 200) % 360;
  return dark ? `hsl(${h.toFixed(1)}, 45%, 38%)` : `hsl(${h.toFixed(1)}, 75%, 86%)`;
}
function clip(s, n) { s = String(s); return s.length > n ? s.slice(0, n - 1) + "\u2026" : s; }
function shapeText(shape) { return "(" + (shape || []).join(", ") + (shape && shape.length === 1 ? ",)" : ")"); }

function realizeOf(fi) { return state.trace.realizes[state.flat[fi][0]]; }
function itemOf(fi) { const [ri, ii] = state.flat[fi]; return state.trace.realizes[ri].items[ii]; }
function kernelOf(item) { return item && item.digest ? state.trace.kernels[item.digest] : null; }
function programOf(item) {
  const k = kernelOf(item);
  if (!k || !k.programs || !k.programs.length) return null;
  return k.programs[item.program === null || item.program === undefined ? 0 : item.program] || k.programs[0];
}
function itemName(item) {
  if (item.kind === "kernel") {
    const p = programOf(item);
    return p ? p.name : "kernel " + String(item.digest || "").slice(0, 8);
  }
  if (item.kind === "copy") return `copy ${item.src_device}\u2192${item.device} ${fmtBytes(item.bytes)}`;
  if (item.kind === "view") return `view of ${item.src_device}`;
  return `${item.kind} ${item.device}`;
}

function buildList() {
  const nav = $("list");
  nav.textContent = "";
  state.flat = [];
  state.trace.realizes.forEach((r, ri) => {
    const items = r.items || [];
    const total = items.reduce((t, it) => t + (mean(it.times) || 0), 0);
    const nk = items.filter((it) => it.kind === "kernel").length;
    const site = r.callsite || "";
    const title = `realize #${ri}: ${nk} kernels, ${items.length} items` + (site ? `, from ${site}` : "");
    nav.append(el("div", { class: "rhead", "data-realize": ri, title, onclick: () => selectRealize(ri) },
      el("span", { class: "rnum" }, "#" + ri), el("span", { class: "rsite" }, site.split(/[\\/]/).pop()),
      el("span", { class: "rtime" }, total ? fmtTime(total) : "")));
    items.forEach((item, ii) => {
      const fi = state.flat.length;
      state.flat.push([ri, ii]);
      nav.append(el("button", { class: "kitem", "data-flat": fi, "data-kind": item.kind, "data-realize": ri,
                                title: `${itemName(item)} on ${item.device}`, onclick: () => select(fi) },
        el("span", { class: "sw", style: `background:${color(ii, false)};border-color:${color(ii, true)}` }),
        el("span", { class: "kname" }, itemName(item)),
        el("span", { class: "ktime" }, fmtTime(mean(item.times)))));
    });
  });
  if (!state.flat.length) nav.append(el("div", { class: "error" }, "this trace has no realizes"));
}

function select(fi, keepNode, reveal = true) {
  if (fi < 0 || fi >= state.flat.length) return;
  state.cur = fi;
  const ri = state.flat[fi][0];
  if (state.shown !== ri) { drawGraph(ri); state.node = -1; }
  else if (!keepNode) state.node = -1;
  for (const b of document.querySelectorAll(".kitem.selected")) b.classList.remove("selected");
  for (const h of document.querySelectorAll(".rhead.current")) h.classList.remove("current");
  const btn = document.querySelector(`.kitem[data-flat="${fi}"]`);
  if (btn) { btn.classList.add("selected"); btn.scrollIntoView({ block: "nearest" }); }
  const head = document.querySelector(`.rhead[data-realize="${ri}"]`);
  if (head) head.classList.add("current");
  highlight(reveal);
  showDetails();
}
function selectRealize(ri) {
  const fi = state.flat.findIndex(([r]) => r === ri);
  if (fi >= 0) select(fi);
}
function move(step) { if (state.flat.length) select(Math.max(0, Math.min(state.flat.length - 1, state.cur + step))); }
function moveRealize(step) {
  const n = state.trace.realizes.length;
  let ri = state.cur >= 0 ? state.flat[state.cur][0] + step : 0;
  while (ri >= 0 && ri < n) {
    if ((state.trace.realizes[ri].items || []).length) return selectRealize(ri);
    ri += step;
  }
}

// -- graph: a layered drawing, left to right (sources first) ---------------------------------------------------------
function layout(nodes) {
  const rank = nodes.map(() => 0);
  nodes.forEach((n, i) => { for (const s of n.srcs || []) if (s < i) rank[i] = Math.max(rank[i], rank[s] + 1); });
  const cols = [];
  nodes.forEach((n, i) => { (cols[rank[i]] = cols[rank[i]] || []).push(i); });
  const users = nodes.map(() => []);
  nodes.forEach((n, i) => { for (const s of n.srcs || []) if (users[s]) users[s].push(i); });
  const pos = nodes.map(() => 0);
  const place = () => cols.forEach((c) => c.forEach((n, j) => { pos[n] = j; }));
  place();
  const bary = (list, fallback) => (list.length ? list.reduce((t, x) => t + pos[x], 0) / list.length : fallback);
  for (let pass = 0; pass < 4; pass++) {
    const order = pass % 2 === 0 ? cols.slice(1) : cols.slice(0, -1).reverse();
    for (const c of order) {
      const key = new Map(c.map((n) => [n, bary(pass % 2 === 0 ? nodes[n].srcs || [] : users[n], pos[n])]));
      c.sort((a, b) => key.get(a) - key.get(b) || pos[a] - pos[b]);
      c.forEach((n, j) => { pos[n] = j; });
    }
  }
  const tallest = Math.max(1, ...cols.map((c) => c.length));
  const xy = nodes.map(() => [0, 0]);
  cols.forEach((c, r) => {
    const top = ((tallest - c.length) * (NODE_H + GAP_Y)) / 2;
    c.forEach((n, j) => { xy[n] = [r * (NODE_W + GAP_X), top + j * (NODE_H + GAP_Y)]; });
  });
  return { xy, width: cols.length * (NODE_W + GAP_X) - GAP_X, height: tallest * (NODE_H + GAP_Y) - GAP_Y };
}

function opName(n) { return n.realized ? "BUFFER" : n.op; }
function nodeLabel(n) {
  const arg = n.arg && !n.realized && n.op !== "ASSIGN" ? " " + n.arg : "";
  return [clip(opName(n) + arg, 21), clip(shapeText(n.shape) + " " + n.dtype, 25)];
}
function nodeInfo(r, i) {
  const n = r.nodes[i];
  const g = state.graph;
  const ks = (g && g.ri === state.shown ? g.kernelsOf[i] : []);
  const names = ks.map((ii) => `${itemName(r.items[ii])} (item ${ii + 1})`);
  const lines = [`%${i}  ${opName(n)}${n.arg && !n.realized ? "  " + n.arg : ""}`,
                 `${shapeText(n.shape)} ${n.dtype} on ${n.device}`];
  if (n.realized) lines.push("already in memory (an input of this realize)");
  else if (n.reason) lines.push("gets memory: " + n.reason);
  else lines.push("no memory of its own: computed inside the kernel(s) below");
  if (names.length) lines.push("kernel: " + names.join(", "));
  return lines;
}

function drawGraph(ri) {
  const r = state.trace.realizes[ri];
  const vp = $("vp");
  vp.textContent = "";
  state.shown = ri;
  const nodes = r.nodes || [];
  const kernelsOf = nodes.map(() => []);
  (r.items || []).forEach((it, ii) => (it.nodes || []).forEach((n) => { if (kernelsOf[n]) kernelsOf[n].push(ii); }));
  if (!nodes.length) {
    const msg = r.graph_omitted ? "graph not recorded: the trace already held its limit of nodes" : "no graph";
    vp.append(Object.assign(sv("text", { x: 20, y: 30 }), { textContent: msg }));
    state.graph = { ri, xy: [], width: 300, height: 40, kernelsOf, nodeEls: [], edgeEls: [] };
    fit(false);
    return;
  }
  const { xy, width, height } = layout(nodes);
  const edgeEls = [];
  const edges = sv("g", {});
  nodes.forEach((n, i) => (n.srcs || []).forEach((s, j) => {
    if (!xy[s]) return;
    const [x1, y1] = [xy[s][0] + NODE_W, xy[s][1] + NODE_H / 2];
    const [x2, y2] = [xy[i][0], xy[i][1] + NODE_H / 2];
    const view = n.views && n.views[j];
    const path = sv("path", { class: "edge" + (view ? " view" : ""), "marker-end": "url(#arrow)",
                              d: `M${x1},${y1} C${x1 + GAP_X / 2},${y1} ${x2 - GAP_X / 2},${y2} ${x2},${y2}` });
    if (view) path.append(Object.assign(sv("title", {}), { textContent: "read through a view: " + view }));
    edges.append(path);
    edgeEls.push([path, s, i]);
  }));
  vp.append(edges);
  const nodeEls = [];
  nodes.forEach((n, i) => {
    const ks = kernelsOf[i];
    const cls = "node" + (n.realized ? " input" : "") + (n.reason ? " mem" : "");
    const g = sv("g", { class: cls, "data-node": i, transform: `translate(${xy[i][0]},${xy[i][1]})` });
    const fill = ks.length ? color(ks[0], false) : "#ffffff";
    const stroke = ks.length ? color(ks[0], true) : "#64748b";
    g.append(sv("rect", { width: NODE_W, height: NODE_H, rx: 5, fill, stroke }));
    const [l1, l2] = nodeLabel(n);
    g.append(Object.assign(sv("text", { x: 7, y: 14 }), { textContent: l1 }));
    g.append(Object.assign(sv("text", { x: 7, y: 27, class: "sub" }), { textContent: l2 }));
    g.append(Object.assign(sv("title", {}), { textContent: nodeInfo(r, i).join("\n") }));
    g.addEventListener("click", (e) => { e.stopPropagation(); pickNode(i); });
    g.addEventListener("mouseenter", () => { $("hover").textContent = nodeInfo(r, i).join("\n"); });
    g.addEventListener("mouseleave", () => { $("hover").textContent = ""; });
    nodeEls.push(g);
  });
  for (const g of nodeEls) vp.append(g);
  state.graph = { ri, xy, width, height, kernelsOf, nodeEls, edgeEls };
  fit(true);
}

function pickNode(i) {
  const g = state.graph;
  state.node = i;
  const ks = g.kernelsOf[i];
  const [ri, ii] = state.flat[state.cur];
  if (ks.length && !ks.includes(ii)) {
    const fi = state.flat.findIndex(([r, k]) => r === ri && k === ks[0]);
    state.tab = "node";
    if (fi >= 0) return select(fi, true, false);
  }
  state.tab = "node";
  highlight(false);
  showDetails();
}

function highlight(andReveal) {
  const g = state.graph;
  if (!g || state.cur < 0) return;
  const item = itemOf(state.cur);
  const mine = new Set(item.nodes || []);
  g.nodeEls.forEach((e, i) => {
    e.classList.toggle("in", mine.has(i));
    e.classList.toggle("dim", mine.size > 0 && !mine.has(i) && !(item.inputs || []).includes(i));
    e.classList.toggle("picked", i === state.node);
  });
  for (const [path, s, t] of g.edgeEls) {
    const inside = mine.has(t) && (mine.has(s) || (item.inputs || []).includes(s));
    path.classList.toggle("in", inside);
    path.classList.toggle("dim", mine.size > 0 && !inside);
  }
  if (andReveal && item.output !== null && item.output !== undefined) reveal(item.output);
}

// -- pan and zoom ----------------------------------------------------------------------------------------------------
function applyView() {
  const v = state.view;
  $("vp").setAttribute("transform", `translate(${v.x},${v.y}) scale(${v.k})`);
}
function fit(readable) {
  const g = state.graph, svg = $("graph");
  if (!g) return;
  const W = svg.clientWidth || 600, H = svg.clientHeight || 300, pad = 16;
  const k = Math.max(0.05, Math.min(1.2, (W - 2 * pad) / Math.max(g.width, 1), (H - 2 * pad) / Math.max(g.height, 1)));
  state.view = { k, x: (W - g.width * k) / 2, y: (H - g.height * k) / 2 };
  if (readable && k < READABLE) state.view = { k: READABLE, x: pad, y: Math.max(pad, (H - g.height * READABLE) / 2) };
  applyView();
}
function zoomAt(f, px, py) {
  const v = state.view;
  const k = Math.max(0.03, Math.min(6, v.k * f));
  v.x = px - ((px - v.x) * k) / v.k;
  v.y = py - ((py - v.y) * k) / v.k;
  v.k = k;
  applyView();
}
function zoom(f) { const svg = $("graph"); zoomAt(f, svg.clientWidth / 2, svg.clientHeight / 2); }
function reveal(i) {
  const g = state.graph, svg = $("graph"), v = state.view;
  if (!g || !g.xy[i]) return;
  const W = svg.clientWidth, H = svg.clientHeight;
  const x = g.xy[i][0] * v.k + v.x, y = g.xy[i][1] * v.k + v.y;
  if (x >= 0 && y >= 0 && x + NODE_W * v.k <= W && y + NODE_H * v.k <= H) return;
  v.x += W / 2 - (x + (NODE_W * v.k) / 2);
  v.y += H / 2 - (y + (NODE_H * v.k) / 2);
  applyView();
}
function setupPanZoom() {
  const svg = $("graph");
  let drag = null;
  svg.addEventListener("pointerdown", (e) => {
    if (e.target.closest && e.target.closest(".node")) return;
    drag = { x: e.clientX, y: e.clientY, vx: state.view.x, vy: state.view.y };
    svg.setPointerCapture(e.pointerId);
    svg.classList.add("dragging");
  });
  svg.addEventListener("pointermove", (e) => {
    if (!drag) return;
    state.view.x = drag.vx + e.clientX - drag.x;
    state.view.y = drag.vy + e.clientY - drag.y;
    applyView();
  });
  const end = () => { drag = null; svg.classList.remove("dragging"); };
  svg.addEventListener("pointerup", end);
  svg.addEventListener("pointercancel", end);
  svg.addEventListener("wheel", (e) => {
    e.preventDefault();
    const box = svg.getBoundingClientRect();
    zoomAt(Math.exp(-e.deltaY * 0.0015), e.clientX - box.left, e.clientY - box.top);
  }, { passive: false });
  window.addEventListener("resize", () => fit(true));
}

// -- details ---------------------------------------------------------------------------------------------------------
function buildTabs() {
  const bar = $("tabs");
  TABS.forEach(([id, label], i) => {
    bar.append(el("button", { role: "tab", id: "tab-" + id, "data-tab": id, "aria-selected": "false",
                              onclick: () => setTab(id) }, label, el("span", { class: "key" }, String(i + 1))));
  });
}
function setTab(id) { state.tab = id; showDetails(); }
function moveTab(step) {
  const i = TABS.findIndex(([id]) => id === state.tab);
  setTab(TABS[(i + step + TABS.length) % TABS.length][0]);
}
function timesText(times) {
  if (!times || !times.length) return "no time measured";
  const m = mean(times);
  if (times.length === 1) return fmtTime(m);
  return `${times.length} runs, mean ${fmtTime(m)}, min ${fmtTime(Math.min(...times))}`;
}

function showDetails() {
  for (const b of document.querySelectorAll(".tabs button")) {
    b.setAttribute("aria-selected", String(b.dataset.tab === state.tab));
  }
  if (state.cur < 0) return;
  const [ri, ii] = state.flat[state.cur];
  const r = state.trace.realizes[ri], item = r.items[ii], prog = programOf(item), kernel = kernelOf(item);
  const head = $("khead");
  head.textContent = "";
  head.append(el("span", { class: "kt", id: "kname" }, itemName(item)),
    el("span", { class: "kv" }, `${item.kind} on ${item.device}`),
    el("span", { class: "kv", id: "ktime" }, timesText(item.times)),
    el("span", { class: "kv" }, `realize #${ri}, item ${ii + 1} of ${r.items.length}`));
  if (prog && prog.opts_from) head.append(el("span", { class: "kv" }, `opts: ${prog.opts_from}`));
  $("panel").textContent = tabText(state.tab, r, item, prog, kernel);
  $("panel").scrollTop = 0;
}

function tabText(tab, r, item, prog, kernel) {
  if (tab === "node") {
    if (state.node < 0) return "Click a node in the graph to see it here.";
    const n = r.nodes[state.node];
    const lines = nodeInfo(r, state.node);
    (n.srcs || []).forEach((s, j) => {
      const v = n.views && n.views[j];
      const src = r.nodes[s];
      lines.push(`source %${s}: ${opName(src)} ${shapeText(src.shape)}` + (v ? `\n    through a view ${v}` : ""));
    });
    return lines.join("\n");
  }
  if (item.kind !== "kernel") {
    const what = item.kind === "copy" ? `a copy of ${item.bytes} bytes from ${item.src_device} to ${item.device}`
      : item.kind === "view" ? `a view into a buffer on ${item.src_device}: no kernel runs`
      : `${item.kind} on ${item.device}: no kernel runs`;
    return `This item is ${what}.\n\ntime: ${timesText(item.times)}`;
  }
  if (tab === "ast") return kernel ? kernel.ast : "no AST recorded";
  if (!prog) return "no program was recorded for this kernel";
  if (prog.error) return prog.error;
  const note = prog.regenerated ? "(compiled before recording began: lowered again for the viewer)\n\n" : "";
  if (tab === "uops") return note + (prog.uops || "no UOps recorded");
  if (tab === "source") return note + (prog.source || "no source recorded");
  const opts = prog.opts && prog.opts.length ? prog.opts.map((o) => "  " + o).join("\n") : "  (none)";
  const all = kernel && kernel.times && kernel.times.length ? timesText(kernel.times) : "no time measured";
  return note + [`optimisations (${prog.opts_from}):`, opts, "",
    `global size   ${prog.global_size ? "[" + prog.global_size.join(", ") + "]" : "-"}`,
    `local size    ${prog.local_size ? "[" + prog.local_size.join(", ") + "]" : "-"}`,
    `operations    ${prog.op_estimate}`, `memory        ${prog.mem_estimate} bytes`,
    `this run      ${timesText(item.times)}`, `every run     ${all}`,
    `variables     ${Object.entries(item.vars || {}).map(([k, v]) => k + "=" + v).join(", ") || "-"}`,
    `digest        ${item.digest}`].join("\n");
}

// -- keyboard --------------------------------------------------------------------------------------------------------
function toggleHelp(open) {
  const h = $("help");
  h.classList.toggle("open", open === undefined ? !h.classList.contains("open") : open);
}
function onKey(e) {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const k = e.key;
  const act = {
    j: () => move(1), ArrowDown: () => move(1), k: () => move(-1), ArrowUp: () => move(-1),
    n: () => moveRealize(1), p: () => moveRealize(-1),
    l: () => moveTab(1), ArrowRight: () => moveTab(1), h: () => moveTab(-1), ArrowLeft: () => moveTab(-1),
    f: () => fit(false), "+": () => zoom(1.25), "=": () => zoom(1.25), "-": () => zoom(0.8),
    "?": () => toggleHelp(), Escape: () => toggleHelp(false),
  };
  if (k >= "1" && k <= String(TABS.length)) { setTab(TABS[Number(k) - 1][0]); e.preventDefault(); return; }
  if (Object.prototype.hasOwnProperty.call(act, k)) { act[k](); e.preventDefault(); }
}

function start(trace) {
  state.trace = trace;
  const realizes = trace.realizes || [];
  const items = realizes.reduce((t, r) => t + (r.items || []).filter((i) => i.kind === "kernel").length, 0);
  const total = realizes.reduce((t, r) => t + (r.items || []).reduce((u, i) => u + (mean(i.times) || 0), 0), 0);
  const count = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  $("meta").textContent = `${trace.program || ""} \u00b7 ${count(realizes.length, "realize")} \u00b7 ` +
    count(items, "kernel") +
    (total ? ` \u00b7 ${fmtTime(total)} measured` : "") + (trace.created ? ` \u00b7 ${trace.created}` : "") +
    (trace.realizes_not_kept ? ` \u00b7 ${trace.realizes_not_kept} later realizes not kept` : "");
  buildList();
  const first = state.flat.findIndex(([ri, ii]) => realizes[ri].items[ii].kind === "kernel");
  select(first >= 0 ? first : 0);
}

buildTabs();
setupPanZoom();
document.addEventListener("keydown", onKey);
$("helpbtn").addEventListener("click", () => toggleHelp());
$("help").addEventListener("click", (e) => { if (e.target === $("help")) toggleHelp(false); });
fetch("trace.json")
  .then((resp) => { if (!resp.ok) throw new Error(`trace.json: HTTP ${resp.status}`); return resp.json(); })
  .then(start)
  .catch((err) => {
    $("meta").textContent = "could not load the trace";
    $("list").append(el("div", { class: "error" }, String(err)));
  });
</script>
</body>
</html>
"""
