// synattn parser playground: one POST /v1/parse per view (the public API, the same limits),
// drawn as displaCy arcs (SVG from the server), a constituency tree and feature heatmaps.
"use strict";

const FEATURES = [
  { name: "slr_soft", title: (p) => `soft SLR m at τ = ${p.tau}`, max: 1 },
  { name: "dea_mask", title: () => "DEA mask (1 = within one arc)", max: 1 },
  { name: "dep_hops", title: () => "dependency hops (255 = unreachable)", max: null },
  { name: "rp_index", title: (p) => `RP index at k = ${p.k} (clip(RP, k) + k)`, max: null },
];
const $ = (id) => document.getElementById(id);

function params() {
  return {
    text: $("text").value,
    pretok: $("pretok").checked,
    backend: $("backend").value,
    scheme: $("scheme").value,
    tau: Number($("tau").value),
    k: Number($("k").value),
    tokenizer: $("tokenizer").value,
  };
}

function body(p, withTokenizer) {
  const sentence = p.pretok ? p.text.trim().split(/\s+/).filter(Boolean) : p.text;
  const b = {
    sentences: [sentence], features: FEATURES.map((f) => f.name), format: "dense",
    tau: p.tau, rp_clip: p.k, render: ["dep_svg", "tree"], strict: true,
  };
  if (p.backend) b.backend = p.backend;
  if (p.scheme) b.scheme = p.scheme;
  if (withTokenizer && p.tokenizer) { b.tokenizer = p.tokenizer; b.render = []; }
  return b;
}

function permalink(p) {
  const q = new URLSearchParams({ text: p.text, tau: String(p.tau), k: String(p.k) });
  if (p.pretok) q.set("pretok", "1");
  if (p.backend) q.set("backend", p.backend);
  if (p.scheme) q.set("scheme", p.scheme);
  if (p.tokenizer) q.set("tokenizer", p.tokenizer);
  return `/?${q.toString()}`;
}

function curlFor(p) {
  const json = JSON.stringify(body(p, false)).replace(/'/g, "'\\''");
  return `curl -s -X POST ${location.origin}/v1/parse \\\n  -H 'Content-Type: application/json' \\\n  -d '${json}'`;
}

async function post(b) {
  const resp = await fetch("/v1/parse", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(b),
  });
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    throw new Error(`${resp.status}: ${data.detail || resp.statusText}`);
  }
  const s = data.sentences[0];
  if (s.error) throw new Error(s.error);
  return { parser: data.parser, sentence: s };
}

function colour(v, max) {
  if (v === null) return "#000000"; // -inf: blocked
  const x = max ? Math.max(0, Math.min(1, v / max)) : 0;
  const light = Math.round(97 - 62 * x);
  return `hsl(212, 70%, ${light}%)`;
}

function heatmap(feature, matrix, labels, p) {
  const fig = document.createElement("figure");
  fig.dataset.feature = feature.name;
  const cap = document.createElement("figcaption");
  cap.textContent = feature.title(p);
  fig.append(cap);
  const flat = matrix.flat().filter((v) => v !== null);
  const max = feature.max ?? Math.max(1, ...flat.filter((v) => v < 255));
  const table = document.createElement("table");
  table.className = "heatmap";
  table.dataset.feature = feature.name;
  const head = table.createTHead().insertRow();
  head.append(document.createElement("th"));
  for (const l of labels) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = l;
    head.append(th);
  }
  const tbody = table.createTBody();
  matrix.forEach((row, i) => {
    const tr = tbody.insertRow();
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = labels[i];
    tr.append(th);
    row.forEach((v, j) => {
      const td = tr.insertCell();
      td.className = "cell";
      const shown = v === null ? "-inf" : Number.isInteger(v) ? String(v) : v.toFixed(3);
      td.dataset.value = shown;
      td.title = `${labels[i]} → ${labels[j]}: ${shown}`;
      td.textContent = shown.length > 4 ? "" : shown;
      td.style.background = colour(v === true ? 1 : v === false ? 0 : v, max);
    });
  });
  fig.append(table);
  const legend = document.createElement("p");
  legend.className = "legend";
  legend.textContent = `rows: queries, columns: keys; dark = ${max}${feature.name === "dea_mask" ? "" : " or more"}; hover for values`;
  fig.append(legend);
  return fig;
}

function drawHeatmaps(target, sentence, labels, p) {
  target.replaceChildren();
  for (const f of FEATURES) {
    const m = sentence.features && sentence.features[f.name];
    if (!m) continue; // a dependency feature without a dependency parse
    const numeric = m.map((r) => r.map((v) => (v === true ? 1 : v === false ? 0 : v)));
    target.append(heatmap(f, numeric, labels, p));
  }
}

// a bracketed tree "(S (NP (DT The) (NN cat)) (VP ...))" as an SVG drawing
function parseTree(text) {
  let i = 0;
  const tokens = text.match(/\(|\)|[^\s()]+/g) || [];
  function node() {
    if (tokens[i] !== "(") return { label: tokens[i++], children: [] };
    i++;
    const label = tokens[i] === "(" ? "" : tokens[i++];
    const children = [];
    while (i < tokens.length && tokens[i] !== ")") children.push(node());
    i++;
    return { label, children };
  }
  return node();
}

function drawTree(target, text) {
  target.replaceChildren();
  if (!text) { target.textContent = "no tree"; return; }
  const root = parseTree(text);
  const NS = "http://www.w3.org/2000/svg";
  const leaves = [];
  (function collect(n) { if (!n.children.length) leaves.push(n); else n.children.forEach(collect); })(root);
  const dx = 58, dy = 40;
  leaves.forEach((l, k) => { l.x = 30 + k * dx; });
  let depth = 0;
  (function place(n, d) {
    n.y = 20 + d * dy; depth = Math.max(depth, d);
    if (n.children.length) {
      n.children.forEach((c) => place(c, d + 1));
      n.x = n.children.reduce((s, c) => s + c.x, 0) / n.children.length;
    }
  })(root, 0);
  leaves.forEach((l) => { l.y = 20 + depth * dy; });
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", String(40 + leaves.length * dx));
  svg.setAttribute("height", String(50 + depth * dy));
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `constituency tree: ${text}`);
  (function draw(n) {
    for (const c of n.children) {
      const line = document.createElementNS(NS, "line");
      line.setAttribute("x1", n.x); line.setAttribute("y1", n.y + 5);
      line.setAttribute("x2", c.x); line.setAttribute("y2", c.y - 12);
      line.setAttribute("stroke", "#6b7280");
      svg.append(line);
      draw(c);
    }
    const t = document.createElementNS(NS, "text");
    t.setAttribute("x", n.x); t.setAttribute("y", n.y);
    t.setAttribute("text-anchor", "middle");
    t.setAttribute("class", n.children.length ? "node" : "leaf");
    t.setAttribute("font-weight", n.children.length ? "600" : "400");
    t.textContent = n.label;
    svg.append(t);
  })(root);
  target.append(svg);
}

async function run() {
  const p = params();
  const status = $("status");
  status.className = "status";
  status.textContent = "parsing…";
  $("permalink").href = permalink(p);
  history.replaceState(null, "", permalink(p));
  try {
    const { parser, sentence } = await post(body(p, false));
    $("arcs").innerHTML = sentence.dep_svg || "<p>no dependency parse from this backend</p>";
    const src = parser.constituency || "";
    $("tree-source").textContent = src.startsWith("derived")
      ? `derived from the dependency parse (scheme: ${src.split(":")[1] || "flat"}), not parsed`
      : src === "given" ? "given with the input" : `parsed by ${src}`;
    drawTree($("tree"), sentence.tree);
    drawHeatmaps($("heatmaps-word"), sentence, sentence.words, p);
    const sub = $("subword-section");
    if (p.tokenizer) {
      const r = await post(body(p, true));
      drawHeatmaps($("heatmaps-subword"), r.sentence, r.sentence.subwords, p);
      sub.hidden = false;
    } else {
      sub.hidden = true;
      $("heatmaps-subword").replaceChildren();
    }
    status.textContent = `${sentence.words.length} words · ${parser.backend} ${parser.model || ""} · constituency: ${src}`;
    for (const w of sentence.warnings || []) status.textContent += ` · warning: ${w}`;
    document.body.dataset.parsed = String(Date.now());
  } catch (err) {
    status.className = "status error";
    status.setAttribute("role", "alert");
    status.textContent = `Could not parse: ${err.message}`;
  }
}

async function init() {
  const q = new URLSearchParams(location.search);
  const info = await (await fetch("/v1/backends")).json();
  for (const b of info.backends.filter((x) => x.available)) {
    $("backend").append(new Option(`${b.name}${b.default ? " (default)" : ""}`, b.name, b.default, b.default));
  }
  $("scheme").append(new Option("server default", ""));
  for (const s of info.schemes || []) $("scheme").append(new Option(s, s));
  for (const t of info.tokenizers || []) $("tokenizer").append(new Option(t, t));
  if (q.has("text")) $("text").value = q.get("text");
  if (q.has("tau")) $("tau").value = q.get("tau");
  if (q.has("k")) $("k").value = q.get("k");
  if (q.get("pretok") === "1") $("pretok").checked = true;
  for (const key of ["backend", "scheme", "tokenizer"]) {
    if (q.has(key)) $(key).value = q.get(key);
  }
  $("form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
  for (const id of ["tau", "k", "tokenizer", "scheme", "backend", "pretok"]) {
    $(id).addEventListener("change", () => run());
  }
  $("show-curl").addEventListener("click", () => {
    const pre = $("curl");
    pre.textContent = curlFor(params());
    pre.hidden = false;
  });
  document.body.dataset.ready = "1";
  run(); // the permalink's sentence, or the example: a first visit shows a parse, not a form
}

init();
