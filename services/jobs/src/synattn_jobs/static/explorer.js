// synattn attention explorer: what every head of a finished run applies to one sentence
// (POST /v1/jobs/{id}/attention), as a layers x heads grid of heatmaps; one head enlarged with
// its tokens, the dependency arcs or the SLR window over the source axis, and as a line view
// (bertviz's: tokens linked by attention weight); two runs side by side with their difference.
// A typed sentence instead of a row: parsed as the run's training data was, translated by the
// model, shown with that translation. Shares dashboard.js's api(), button() and showError().
// Permalinks: #attention/JOB/SPLIT/ROW/MODULE/LAYER/HEAD[/vs/JOB2], and for a typed sentence
// #attention/JOB/text/SENTENCE/MODULE/LAYER/HEAD[/vs/JOB2] (the sentence URI-encoded).
"use strict";

const EX = { job: null, layer: 0, head: 0, data: null, other: null };
const exCache = new Map(); // job/split/row or job/text/sentence -> answer (the last 24)
const SVGNS = "http://www.w3.org/2000/svg";

function exEl(tag, attrs = {}, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

// one sentence's attention: a row of a split, or (text non-empty) a sentence the user typed
async function fetchAttention(job, split, row, text = "") {
  const key = text ? `${job}/text/${text}` : `${job}/${split}/${row}`;
  if (exCache.has(key)) return exCache.get(key);
  const resp = await api(`/v1/jobs/${job}/attention`, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(text ? { text } : { split, row }),
  });
  const data = await resp.json();
  exCache.set(key, data);
  if (exCache.size > 24) exCache.delete(exCache.keys().next().value);
  return data;
}

// white -> blue for probabilities, blue <- white -> red for differences
function seqColour(v) {
  const t = Math.max(0, Math.min(1, v));
  return `rgb(${Math.round(255 - 244 * t)},${Math.round(255 - 163 * t)},${Math.round(255 - 82 * t)})`;
}
function divColour(d) {
  const t = Math.max(-1, Math.min(1, d));
  if (t >= 0) return `rgb(255,${Math.round(255 - 200 * t)},${Math.round(255 - 200 * t)})`;
  return `rgb(${Math.round(255 + 200 * t)},${Math.round(255 + 120 * t)},255)`;
}

// a run as its job's name, with its id only where another listed job has the same name; the
// id alone when this page has not listed it (another user's)
function runLabel(id) {
  const j = jobs.get(id);
  if (!j || !j.name) return id;
  const same = [...jobs.values()].some((o) => o.id !== id && o.name === j.name);
  return same ? `${j.name} (${id})` : j.name;
}

function modulesOf(data, kind) {
  return Object.keys(data.modules).filter((m) => m.startsWith(kind + "."))
    .sort((a, b) => Number(a.split(".")[1]) - Number(b.split(".")[1]));
}

function axisTokens(data, kind) {
  const { source, target } = data.tokens;
  return { queries: kind === "enc_self" ? source : target, keys: kind === "dec_self" ? target : source };
}

function roleClass(role) {
  if (role.startsWith("fixed")) return "role-fixed";
  if (role.includes("pruned")) return "role-pruned";
  if (/gated|masked|enlivened|biased|averaged/.test(role)) return "role-syntax";
  return "role-learned";
}

// one matrix as an SVG heatmap; cells carry their value (data-v) and a hover title
function heatmap(matrix, cell, opts = {}) {
  const { queries = null, keys = null, diff = false, label = "" } = opts;
  const rows = matrix.length, cols = rows ? matrix[0].length : 0;
  const left = queries ? 90 : 0, top = keys ? 70 : 0;
  const svg = exEl("svg", { class: "attn", width: left + cols * cell + 2, height: top + rows * cell + 2,
    role: "img", "aria-label": label });
  const grid = exEl("g", { transform: `translate(${left},${top})` });
  for (let q = 0; q < rows; q++) {
    for (let k = 0; k < cols; k++) {
      const v = matrix[q][k];
      const r = exEl("rect", { x: k * cell, y: q * cell, width: cell, height: cell,
        fill: diff ? divColour(v) : seqColour(v), class: "cell", "data-q": q, "data-k": k, "data-v": v });
      if (queries) r.append(exEl("title", {}, `${queries[q]} → ${keys[k]}: ${Number(v).toFixed(4)}`));
      grid.append(r);
    }
  }
  svg.append(grid);
  if (queries) {
    queries.forEach((t, q) => svg.append(exEl("text", { x: left - 4, y: top + q * cell + cell * 0.7,
      "text-anchor": "end", class: "qtok" }, t)));
    keys.forEach((t, k) => {
      const x = left + k * cell + cell * 0.65, y = top - 4;
      svg.append(exEl("text", { x, y, transform: `rotate(-60 ${x} ${y})`, class: "ktok" }, t));
    });
  }
  svg.dataset.left = left; svg.dataset.top = top; svg.dataset.cell = cell; svg.dataset.rows = rows;
  return svg;
}

// one head as bertviz's line view draws it, beside the heat map: each query token (left) linked
// to every key token (right) by a line as opaque as its weight, weights under 2% left out;
// pointing at a token keeps only its own lines
function lineView(matrix, queries, keys, label) {
  const rowH = 16, colW = 120, gap = 170, top = 4;
  const y = (i) => top + (i + 0.5) * rowH;
  const svg = exEl("svg", { class: "attn lines", width: 2 * colW + gap, height: top * 2 + rowH * Math.max(queries.length, keys.length),
    role: "img", "aria-label": label });
  const links = exEl("g", { class: "links" });
  matrix.forEach((row, q) => row.forEach((v, k) => {
    if (!(v >= 0.02)) return;
    const line = exEl("line", { x1: colW + 4, y1: y(q), x2: colW + gap - 4, y2: y(k), class: "link", stroke: "#0b5cad",
      "stroke-width": 2, "stroke-opacity": Math.min(1, v).toFixed(3), "data-q": q, "data-k": k, "data-v": v });
    line.append(exEl("title", {}, `${queries[q]} → ${keys[k]}: ${Number(v).toFixed(4)}`));
    links.append(line);
  }));
  svg.append(links);
  queries.forEach((t, q) => svg.append(exEl("text", { x: colW, y: y(q) + 4, "text-anchor": "end", class: "qtok", "data-q": q }, t)));
  keys.forEach((t, k) => svg.append(exEl("text", { x: colW + gap, y: y(k) + 4, class: "ktok", "data-k": k }, t)));
  const only = (attr, value) => { for (const l of links.children) l.style.display = value === null || l.dataset[attr] === value ? "" : "none"; };
  svg.addEventListener("mouseover", (e) => {
    if (e.target.dataset.q !== undefined && e.target.tagName === "text") only("q", e.target.dataset.q);
    else if (e.target.dataset.k !== undefined && e.target.tagName === "text") only("k", e.target.dataset.k);
  });
  svg.addEventListener("mouseleave", () => only("q", null));
  return svg;
}

function firstPiece(s2w) { // word -> its first subword position
  const first = new Map();
  s2w.forEach((w, i) => { if (w >= 0 && !first.has(w)) first.set(w, i); });
  return first;
}

// dependency arcs under the key axis (source keys only): one per non-root word, from the
// dependent's first subword to its head's, hanging below the map
function drawArcs(svg, data) {
  const left = Number(svg.dataset.left), cell = Number(svg.dataset.cell);
  const base = Number(svg.dataset.top) + Number(svg.dataset.rows) * cell + 2;
  const first = firstPiece(data.syntax.subword_to_word);
  const g = exEl("g", { class: "arcs" });
  let deepest = 0;
  for (const a of data.syntax.arcs) {
    const x1 = left + (first.get(a.dep) + 0.5) * cell, x2 = left + (first.get(a.head) + 0.5) * cell;
    const h = 6 + Math.abs(x2 - x1) / 4;
    deepest = Math.max(deepest, h);
    const path = exEl("path", { d: `M${x1},${base} Q${(x1 + x2) / 2},${base + 2 * h} ${x2},${base}`,
      class: "arc", "data-dep": a.dep, "data-head": a.head });
    path.append(exEl("title", {}, `${data.syntax.words[a.dep]} ← ${a.rel || ""} ← ${data.syntax.words[a.head]}`));
    g.append(path);
  }
  svg.append(g);
  svg.setAttribute("height", String(base + deepest + 8));
  return data.syntax.arcs.length;
}

// the hard SLR range [L_i, R_i] of each source query, outlined on its row
function drawSlr(svg, data) {
  const iv = data.syntax.matrices.slr_interval;
  if (!iv) return false;
  const left = Number(svg.dataset.left), top = Number(svg.dataset.top), cell = Number(svg.dataset.cell);
  const g = exEl("g", { class: "slr" });
  iv[0].forEach((lo, q) => g.append(exEl("rect", { class: "slr-window", x: left + lo * cell,
    y: top + q * cell, width: (iv[1][q] - lo + 1) * cell, height: cell })));
  svg.append(g);
  return true;
}

function drawGrid() {
  const kind = $("ex-module").value, data = EX.data;
  const grid = $("ex-grid");
  grid.replaceChildren();
  const names = modulesOf(data, kind);
  for (const name of names) {
    const layer = Number(name.split(".")[1]);
    const row = document.createElement("div");
    row.className = "layer"; row.dataset.module = name;
    const lab = document.createElement("span"); lab.className = "layer-name"; lab.textContent = `layer ${layer}`;
    row.append(lab);
    data.modules[name].forEach((m, h) => {
      const role = data.roles[name][h];
      const cell = Math.max(2, Math.floor(96 / Math.max(m.length, m[0].length)));
      const b = document.createElement("button");
      b.type = "button";
      b.className = `head ${roleClass(role)}`;
      b.dataset.module = name; b.dataset.head = h;
      b.setAttribute("aria-pressed", String(layer === EX.layer && h === EX.head));
      b.setAttribute("aria-label", `layer ${layer} head ${h}: ${role}`);
      b.title = `${name} head ${h}: ${role}`;
      b.append(heatmap(m, cell, { label: `${name} head ${h}` }));
      const cap = document.createElement("span"); cap.className = "role"; cap.textContent = `h${h} ${role}`;
      b.append(cap);
      b.addEventListener("click", () => { EX.layer = layer; EX.head = h; drawGrid(); drawDetail(); setHash(); });
      row.append(b);
    });
    grid.append(row);
  }
}

function figure(caption, svg) {
  const f = document.createElement("figure");
  f.className = "head-detail";
  const c = document.createElement("figcaption"); c.textContent = caption;
  f.append(c, svg);
  return f;
}

function drawDetail() {
  const kind = $("ex-module").value, data = EX.data;
  const name = `${kind}.${EX.layer}`;
  const target = $("ex-detail");
  target.replaceChildren();
  if (!data.modules[name] || !data.modules[name][EX.head]) return;
  const { queries, keys } = axisTokens(data, kind);
  const room = EX.other ? 290 : 640; // three maps side by side when comparing
  const cell = Math.max(6, Math.min(22, Math.floor(room / Math.max(queries.length, keys.length))));
  const matrix = data.modules[name][EX.head];
  const role = data.roles[name][EX.head];
  const big = heatmap(matrix, cell, { queries, keys, label: `${name} head ${EX.head}` });
  big.id = "ex-map-a";
  const notes = [`${name} head ${EX.head}: ${role}`];
  const stats = (data.stats || {})[name] || {};
  for (const [k, v] of Object.entries(stats)) if (v[EX.head] !== null && v[EX.head] !== undefined) notes.push(`${k} ${Number(v[EX.head]).toFixed(3)}`);
  const overlay = $("ex-overlay").value;
  if (overlay === "arcs") {
    if (kind === "dec_self") notes.push("arcs are drawn on the source axis: pick encoder self or cross attention");
    else notes.push(`${drawArcs(big, data)} dependency arcs (one per non-root word)`);
  } else if (overlay === "slr") {
    if (kind !== "enc_self") notes.push("the SLR window belongs to encoder self-attention");
    else if (!drawSlr(big, data)) notes.push("this run requested no SLR, so the model read no window");
  }
  target.append(figure(`${runLabel(EX.data.job)} · ${notes.join(" · ")}`, big));
  const other = EX.other;
  if (!other) {
    const lines = lineView(matrix, queries, keys, `${name} head ${EX.head}: line view`);
    lines.id = "ex-lines";
    target.append(figure("line view: each query linked to the keys it attends to, as opaque as " +
      "the weight (under 2% not drawn); point at a token to see only its lines", lines));
  }
  if (other) {
    // a typed sentence: each run has its own translation, so only the axes shown must agree
    const same = JSON.stringify(axisTokens(other, kind)) === JSON.stringify({ queries, keys });
    if (!same || !other.modules[name] || !other.modules[name][EX.head]) {
      target.append(figure(`${runLabel(other.job)}: not comparable (its tokens or heads differ)`, exEl("svg", { width: 1, height: 1 })));
      return;
    }
    const b = other.modules[name][EX.head];
    const mapB = heatmap(b, cell, { queries, keys, label: `${runLabel(other.job)} ${name} head ${EX.head}` });
    mapB.id = "ex-map-b";
    const d = matrix.map((row, q) => row.map((v, k) => v - b[q][k]));
    const mapD = heatmap(d, cell, { queries, keys, diff: true, label: "difference" });
    mapD.id = "ex-map-diff";
    target.append(figure(`${runLabel(other.job)} · ${other.roles[name][EX.head]}`, mapB),
      figure(`difference (${runLabel(EX.data.job)} − ${runLabel(other.job)}; red: more on the first)`, mapD));
  }
}

function typedText() {
  return $("ex-text").value.trim();
}

// a typed sentence replaces the row: split and row are greyed out while there is one
function syncTextMode() {
  const typed = Boolean(typedText());
  $("ex-split").disabled = typed;
  $("ex-row").disabled = typed;
}

function setHash() {
  const text = typedText();
  const parts = ["attention", EX.job, text ? "text" : $("ex-split").value, text || $("ex-row").value,
    $("ex-module").value, EX.layer, EX.head];
  if ($("ex-compare").value) parts.push("vs", $("ex-compare").value);
  const hash = "#" + parts.map(encodeURIComponent).join("/");
  $("ex-permalink").href = hash;
  if (location.hash !== hash) history.replaceState(null, "", hash);
}

function fillCompare(job) {
  const sel = $("ex-compare"), keep = sel.value;
  const runs = [...jobs.values()].filter((j) => j.kind === "train" && j.state === "succeeded" && j.id !== job);
  sel.replaceChildren(new Option("(no second run)", ""), ...runs.map((j) => new Option(runLabel(j.id), j.id)));
  if ([...sel.options].some((o) => o.value === keep)) sel.value = keep;
}

// the model's translation of a typed sentence (each run's own when two are compared)
function showTranslation() {
  const out = $("ex-translation");
  out.replaceChildren();
  out.hidden = !EX.data || typeof EX.data.translation !== "string";
  if (out.hidden) return;
  const line = (run, data) => {
    const p = document.createElement("span");
    p.className = "translation"; p.dataset.job = run;
    p.textContent = `${runLabel(run)} translates: ${data.translation}`;
    return p;
  };
  out.append(line(EX.data.job, EX.data));
  if (EX.other && typeof EX.other.translation === "string") out.append(document.createElement("br"), line(EX.other.job, EX.other));
}

async function showExplorer() {
  const note = $("explorer-note");
  const split = $("ex-split").value, row = Number($("ex-row").value), vs = $("ex-compare").value;
  const text = typedText();
  syncTextMode();
  note.textContent = text ? "parsing, translating…" : "loading…";
  try {
    EX.data = await fetchAttention(EX.job, split, row, text);
    EX.other = vs ? await fetchAttention(vs, split, row, text) : null;
  } catch (err) {
    EX.data = null;
    $("ex-grid").replaceChildren(); $("ex-detail").replaceChildren();
    showTranslation();
    note.textContent = `No attention for job ${EX.job}: ${err.message}`;
    note.className = "error";
    return;
  }
  note.className = "legend";
  const n = modulesOf(EX.data, $("ex-module").value).length;
  const what = text ? "your sentence (parsed as the run's training data was)" : `${split} row ${row}`;
  const forced = text ? "teacher-forced on the model's own greedy translation" : "teacher-forced on the reference";
  note.textContent = `${what}: ${EX.data.tokens.source.length} source and ` +
    `${EX.data.tokens.target.length} target subwords; ${n} layers × ` +
    `${EX.data.modules[`${$("ex-module").value}.0`].length} heads; ${forced}`;
  if (EX.layer >= n) EX.layer = 0;
  showTranslation();
  drawGrid();
  drawDetail();
  setHash();
  const which = text ? `text/${text}` : `${split}/${row}`;
  document.body.dataset.explorer = `${EX.job}/${which}/${$("ex-module").value}/${EX.layer}/${EX.head}/${vs}`;
}

function openExplorer(job, opts = {}) {
  EX.job = job;
  EX.layer = opts.layer || 0;
  EX.head = opts.head || 0;
  const j = jobs.get(job);
  $("explorer-job").textContent = `(${j ? j.name : job})`;
  if (opts.split) $("ex-split").value = opts.split;
  if (opts.row !== undefined) $("ex-row").value = opts.row;
  if (opts.text !== undefined) $("ex-text").value = opts.text;
  if (opts.module) $("ex-module").value = opts.module;
  fillCompare(job);
  if (opts.vs !== undefined) {
    if (opts.vs && ![...$("ex-compare").options].some((o) => o.value === opts.vs)) $("ex-compare").append(new Option(runLabel(opts.vs), opts.vs));
    $("ex-compare").value = opts.vs;
  }
  $("explorer").hidden = false;
  $("explorer").scrollIntoView();
  return showExplorer();
}

// #attention/JOB/SPLIT/ROW/MODULE/LAYER/HEAD[/vs/JOB2]: opened after sign-in and on change
function routeHash() {
  // a link followed before the jobs list arrived waits for it (sign-in opens it then), so its
  // runs are named in the captions and translations, not shown by id
  if (!listed) return;
  const parts = location.hash.replace(/^#/, "").split("/").map(decodeURIComponent);
  if (parts[0] !== "attention" || !/^[0-9a-f]{12}$/.test(parts[1] || "")) return;
  const vs = parts[7] === "vs" && /^[0-9a-f]{12}$/.test(parts[8] || "") ? parts[8] : "";
  const key = location.hash;
  // the same link asked again while it loads (sign-in's call and a hashchange) is one request
  if (routeHash.last === key && (EX.data || routeHash.pending)) return;
  routeHash.last = key;
  const sentence = parts[2] === "text" ? { text: (parts[3] || "").slice(0, 1000) }
    : { split: parts[2] === "test" ? "test" : "valid", row: Math.max(0, Number(parts[3]) || 0), text: "" };
  routeHash.pending = openExplorer(parts[1], { ...sentence,
    module: ["enc_self", "dec_self", "enc_dec"].includes(parts[4]) ? parts[4] : "enc_self",
    layer: Number(parts[5]) || 0, head: Number(parts[6]) || 0, vs })
    .finally(() => { routeHash.pending = null; });
}

function initExplorer() {
  $("explorer-form").addEventListener("submit", (e) => { e.preventDefault(); if (EX.job) showExplorer(); });
  $("ex-text").addEventListener("input", syncTextMode);
  for (const id of ["ex-module", "ex-overlay"]) $(id).addEventListener("change", () => { if (EX.data) { drawGrid(); drawDetail(); setHash(); } });
  $("ex-compare").addEventListener("change", () => { if (EX.job) showExplorer(); });
  window.addEventListener("hashchange", routeHash);
}

initExplorer();
