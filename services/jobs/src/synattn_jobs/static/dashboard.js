// synattn experiment dashboard: the job API's own routes with a bearer token (session storage),
// live progress from each job's server-sent events, loss curves as they arrive, cancel,
// reports and artifacts. No request leaves this origin.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY = "synattn-token";
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const streams = new Map(); // job id -> AbortController of its event stream
let jobs = new Map();
let listed = false; // the jobs list has arrived: a permalink opened before it would show run ids
let selected = null;
let positions = new Map(); // queued job id -> its place in the fair order (/v1/queue)
let admin = false; // an admin token sees every user's jobs: an owner column says whose

function token() { return sessionStorage.getItem(KEY); }

async function api(path, options = {}) {
  const resp = await fetch(path, {
    ...options, headers: { ...(options.headers || {}), Authorization: `Bearer ${token()}` },
  });
  if (!resp.ok) {
    const body = await resp.json().catch(() => ({}));
    const err = new Error(`${resp.status}: ${body.detail || resp.statusText}`);
    err.status = resp.status;
    throw err;
  }
  return resp;
}

function showError(message) {
  const e = $("error");
  e.textContent = message;
  e.hidden = !message;
}

async function signIn(t) {
  sessionStorage.setItem(KEY, t);
  try {
    const who = await (await api("/v1/tokens/self")).json();
    $("whoami").textContent = `signed in as ${who.name}${who.admin ? " (admin)" : ""}`;
    admin = Boolean(who.admin);
    for (const th of document.querySelectorAll("th.owner")) th.hidden = !admin;
    $("signin").hidden = true;
    $("signout").hidden = false;
    $("app").hidden = false;
    showError("");
    await refresh();
    routeHash(); // a permalink to a head of a run
  } catch (err) {
    sessionStorage.removeItem(KEY);
    showError(`That token was refused (${err.message}). Check it, or create one with ` +
      "`synattn token create NAME`.");
  }
}

function signOut() {
  sessionStorage.removeItem(KEY);
  for (const c of streams.values()) c.abort();
  streams.clear();
  location.reload();
}

// a finished run's BLEU once per final model it scored ("BLEU 27.1 (average) · BLEU 26.8
// (last)"), the primary selection first, selections that scored the same shown together;
// the progress event's BLEU only while the result has not arrived
function bleuText(job) {
  const res = job.result || {}, p = job.progress || {};
  const bySel = res.by_selection || {};
  const order = Object.keys(bySel).sort((a, b) => (b === res.selection) - (a === res.selection));
  const groups = new Map(); // BLEU -> the selections that scored it
  for (const sel of order) {
    if (bySel[sel].bleu === undefined || bySel[sel].bleu === null) continue;
    const key = Number(bySel[sel].bleu).toFixed(2);
    groups.set(key, [...(groups.get(key) || []), sel]);
  }
  if (!groups.size && res.bleu !== undefined && res.bleu !== null) {
    groups.set(Number(res.bleu).toFixed(2), res.selection ? [res.selection] : []);
  }
  if (!groups.size && p.bleu !== undefined && p.bleu !== null) groups.set(Number(p.bleu).toFixed(2), []);
  return [...groups].map(([bleu, sels]) => `BLEU ${bleu}${sels.length ? ` (${sels.join(", ")})` : ""}`);
}

function progressText(job) {
  const p = job.progress || {};
  const parts = [];
  const done = TERMINAL.has(job.state);
  if (job.state === "queued" && positions.has(job.id)) parts.push(`position ${positions.get(job.id)} in the ${job.kind} queue`);
  // the Slurm executor: Slurm's job id, its state and why it waits ("Slurm 1234 PENDING (Priority)")
  if (job.slurm_job && !done) parts.push(`Slurm ${job.slurm_job} ${job.slurm_state || ""}${job.slurm_reason ? ` (${job.slurm_reason})` : ""}`.trim());
  // a finished job says so, not the last phase it went through ("translate valid (average)")
  const word = job.state === "succeeded" ? "finished" : job.state;
  if (done && !(job.error || "").startsWith(word)) parts.push(word); // "cancelled at update 40"
  else if (!done && p.phase) parts.push(p.phase);
  if (p.update !== undefined) parts.push(`update ${p.update}${p.max_updates ? ` / ${p.max_updates}` : ""}`);
  if (p.loss !== undefined && p.loss !== null) parts.push(`loss ${Number(p.loss).toFixed(3)}`);
  if (p.tokens_per_s && !done) parts.push(`${Math.round(p.tokens_per_s)} tok/s`);
  if (job.state === "running" && p.phase === "train" && p.eta_s !== undefined && p.eta_s !== null) {
    const s = Math.round(p.eta_s); // H:MM:SS of the training left, at this run's pace so far
    parts.push(`ETA ${Math.floor(s / 3600)}:${String(Math.floor(s / 60) % 60).padStart(2, "0")}:${String(s % 60).padStart(2, "0")}`);
  }
  parts.push(...bleuText(job));
  if (p.rows !== undefined) parts.push(`${p.rows} rows`);
  const why = causeOf(job.error);
  if (why) parts.push(why);
  return parts.join(" · ") || "–";
}

// A job's error in one line (synattn_jobs.failure.cause, the same rule): its first line,
// which says why it failed (for a multi-process job, which rank and its error), or the last
// line of an older record that is a bare Python traceback. The record keeps the rest.
function causeOf(error) {
  const lines = (error || "").trim().split("\n").filter((line) => line.trim());
  if (!lines.length) return "";
  const first = lines[0];
  const traceback = first.startsWith("Traceback") || /^\s/.test(first)
    || first.includes('File "') || first.includes('", line ') || first.trim().startsWith("^");
  return (traceback ? lines[lines.length - 1] : first).split(/\s+/).filter(Boolean).join(" ").slice(0, 600);
}

function button(text, cls, onClick, label) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = text;
  if (cls) b.className = cls;
  if (label) b.setAttribute("aria-label", label);
  b.addEventListener("click", onClick);
  return b;
}

// whose a job or experiment is: shown to an admin only (a user sees only their own)
function ownerCell(tr, owner) {
  const td = tr.insertCell();
  td.className = "owner";
  td.textContent = owner || "–";
  td.hidden = !admin;
}

function jobRow(job) {
  const tr = document.createElement("tr");
  tr.id = `job-${job.id}`;
  tr.dataset.state = job.state;
  const name = tr.insertCell(); name.textContent = job.name;
  ownerCell(tr, job.owner);
  const kind = tr.insertCell(); kind.textContent = job.kind;
  const state = tr.insertCell(); state.textContent = job.state; state.className = `state-${job.state}`;
  const prog = tr.insertCell(); prog.className = "progress"; prog.textContent = progressText(job);
  const actions = tr.insertCell();
  if (job.kind === "train") actions.append(button("loss", "secondary", () => select(job.id), `loss curve of ${job.name}`));
  actions.append(" ", button("files", "secondary", () => showArtifacts(job), `artifacts of ${job.name}`));
  if (job.kind === "train" && job.state === "succeeded") {
    actions.append(" ", button("attention", "secondary attention", () => openExplorer(job.id), `attention of ${job.name}`));
  }
  if (!TERMINAL.has(job.state)) {
    actions.append(" ", button("Cancel", "danger cancel", () => cancel(job), `cancel ${job.name}`));
  }
  return tr;
}

let lastDraw = 0;

function updateRow(job) {
  jobs.set(job.id, { ...(jobs.get(job.id) || {}), ...job });
  const full = jobs.get(job.id);
  const old = $(`job-${job.id}`);
  if (old) old.replaceWith(jobRow(full));
  if (job.id === selected && Date.now() - lastDraw > 1000) { // the curve grows with progress
    lastDraw = Date.now();
    drawLoss();
  }
}

async function cancel(job) {
  try {
    updateRow(await (await api(`/v1/jobs/${job.id}/cancel`, { method: "POST" })).json());
  } catch (err) { showError(`Cancel failed: ${err.message}`); }
}

// server-sent events over fetch (EventSource cannot send an Authorization header)
async function follow(job) {
  if (streams.has(job.id) || TERMINAL.has(job.state)) return;
  const ctl = new AbortController();
  streams.set(job.id, ctl);
  try {
    const resp = await api(`/v1/jobs/${job.id}/events?interval=0.5`, { signal: ctl.signal });
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const event = (block.match(/^event: (.*)$/m) || [])[1];
        const data = JSON.parse((block.match(/^data: (.*)$/m) || [])[1] || "{}");
        if (event === "progress") updateRow(data);
        if (event === "end") updateRow({ id: job.id, state: data.state });
      }
    }
  } catch (err) {
    if (err.name !== "AbortError") console.warn("event stream", job.id, err.message);
  } finally {
    streams.delete(job.id);
    if (!ctl.signal.aborted) setTimeout(refresh, 200);
  }
}

function select(id) {
  selected = id;
  const job = jobs.get(id);
  $("loss-job").textContent = job ? `(${job.name})` : "";
  drawLoss();
}

async function drawLoss() {
  const target = $("loss");
  if (!selected) { target.textContent = "pick a training job's “loss” button"; return; }
  let records = [];
  try {
    records = await (await api(`/v1/jobs/${selected}/metrics?limit=5000`)).json();
  } catch (err) { target.textContent = `no metrics: ${err.message}`; return; }
  const pts = records.filter((r) => r.event === "update" && r.loss !== null).map((r) => [r.update, r.loss]);
  if (!pts.length) { target.textContent = "no updates logged yet"; return; }
  const W = 520, H = 260, L = 50, B = 36, T = 12, R = 12;
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
  const y0 = Math.min(...ys), y1 = Math.max(...ys, y0 + 1e-6);
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `training loss from ${ys[0].toFixed(2)} to ${ys[ys.length - 1].toFixed(2)} over ${xs[xs.length - 1]} updates`);
  const line = document.createElementNS(NS, "polyline");
  line.setAttribute("points", pts.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" "));
  line.setAttribute("fill", "none"); line.setAttribute("stroke", "#0b5cad"); line.setAttribute("stroke-width", "2");
  line.dataset.points = String(pts.length);
  svg.append(line);
  const text = (x, y, s, anchor = "middle") => {
    const t = document.createElementNS(NS, "text");
    t.setAttribute("x", x); t.setAttribute("y", y); t.setAttribute("text-anchor", anchor);
    t.setAttribute("font-size", "11"); t.textContent = s; svg.append(t);
  };
  const axis = (x1_, y1_, x2_, y2_) => {
    const a = document.createElementNS(NS, "line");
    a.setAttribute("x1", x1_); a.setAttribute("y1", y1_); a.setAttribute("x2", x2_); a.setAttribute("y2", y2_);
    a.setAttribute("stroke", "#4a4a4a"); svg.append(a);
  };
  axis(L, H - B, W - R, H - B); axis(L, T, L, H - B);
  text((L + W - R) / 2, H - 6, "update");
  text(L - 6, T + 8, y1.toFixed(2), "end"); text(L - 6, H - B, y0.toFixed(2), "end");
  text(L, H - B + 14, String(x0)); text(W - R, H - B + 14, String(x1));
  text(14, (T + H - B) / 2, "loss");
  target.replaceChildren(svg);
}

async function showArtifacts(job) {
  $("art-job").textContent = `(${job.name})`;
  const list = $("artifacts");
  list.replaceChildren();
  try {
    const files = await (await api(`/v1/jobs/${job.id}/artifacts`)).json();
    if (!files.length) { list.textContent = "no files yet"; return; }
    for (const f of files.slice(0, 200)) {
      const li = document.createElement("li");
      li.append(button(f.name, "secondary", () => download(job, f.name), `download ${f.name}`), ` ${f.bytes} bytes`);
      list.append(li);
    }
  } catch (err) { list.textContent = err.message; }
}

async function download(job, name) {
  const blob = await (await api(`/v1/jobs/${job.id}/artifacts/${name.split("/").map(encodeURIComponent).join("/")}`)).blob();
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name.split("/").pop();
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

// the full HTML report (figures embedded) in a new tab: fetched with the bearer header, which
// a plain link cannot send, and shown from a blob URL. The tab is opened on the click itself,
// before the report is rendered, so that no popup blocker takes it for an unasked window.
async function openFullReport(exp) {
  const tab = window.open("", "_blank");
  if (tab) tab.document.title = `report ${exp.name}: rendering…`;
  try {
    const resp = await api(`/v1/experiments/${exp.id}/report?format=html`, { headers: { Accept: "text/html" } });
    const url = URL.createObjectURL(new Blob([await resp.blob()], { type: "text/html" }));
    setTimeout(() => URL.revokeObjectURL(url), 60000);
    if (tab && !tab.closed) {
      tab.opener = null; // the report needs nothing of this page
      tab.location.replace(url);
    } else { // no tab (a blocker): save it instead
      const a = document.createElement("a");
      a.href = url;
      a.download = `report-${exp.name}.html`;
      a.click();
    }
  } catch (err) {
    if (tab) tab.close();
    showError(`No full report for ${exp.name}: ${err.message}`);
  }
}

async function showReport(exp) {
  const rep = await (await api(`/v1/experiments/${exp.id}/report`)).json();
  $("report").hidden = false;
  $("report-h").textContent = `Report: ${rep.name}`;
  $("report-note").textContent = `${rep.split} BLEU, seeds ${JSON.stringify(rep.seeds)}; ` +
    "verdict needs the seed test and the bootstrap to agree; an inconclusive row is read from its interval, not as no effect. " + (rep.warnings || []).join(" ");
  const table = $("report-table");
  table.replaceChildren();
  const num = (v, digits, sign) => v === null || v === undefined ? "–" : (sign && v >= 0 ? "+" : "") + v.toFixed(digits);
  const cols = [
    ["system", (r) => r.variant + (r.is_baseline ? " (baseline)" : "")],
    ["runs done", (r) => `${r.succeeded}/${r.runs}`],
    ["BLEU", (r) => num(r.bleu_mean, 2)],
    ["± std", (r) => num(r.bleu_std, 2)],
    ["against", (r) => r.vs || "–"],
    ["Δ BLEU", (r) => num(r.delta, 2, true)],
    ["95% CI of Δ", (r) => r.ci95 ? `[${num(r.ci95[0], 2, true)}, ${num(r.ci95[1], 2, true)}]` : "–"],
    ["detectable Δ (80%)", (r) => r.mde === null || r.mde === undefined ? "–" : `≥ ${num(r.mde, 2)}`],
    ["p (seeds, Holm)", (r) => num(r.seed_p_holm ?? r.seed_p, 3)],
    ["p (bootstrap, Holm)", (r) => num(r.p_value_holm ?? r.p_value, 3)],
    ["verdict", (r) => r.verdict || "–"],
  ];
  const head = table.createTHead().insertRow();
  for (const [c] of cols) { const th = document.createElement("th"); th.scope = "col"; th.textContent = c; head.append(th); }
  const body = table.createTBody();
  for (const r of rep.rows) {
    const tr = body.insertRow();
    for (const [, cell] of cols) tr.insertCell().textContent = cell(r);
  }
  $("report").scrollIntoView();
}

async function refresh() {
  if (!token()) return;
  let exps, list, queue;
  try {
    [exps, list, queue] = await Promise.all([
      api("/v1/experiments").then((r) => r.json()), api("/v1/jobs?limit=500").then((r) => r.json()),
      api("/v1/queue").then((r) => r.json()),
    ]);
  } catch (err) {
    if (err.status === 401 || err.status === 403) { showError(`Signed out: ${err.message}`); sessionStorage.removeItem(KEY); }
    return;
  }
  positions = new Map(queue.jobs.map((q) => [q.id, q.position]));
  $("empty").hidden = exps.length + list.length > 0;
  jobs = new Map(list.map((j) => [j.id, j]));
  listed = true;
  const tbody = $("jobs").tBodies[0];
  tbody.replaceChildren(...list.slice().reverse().map(jobRow));
  const etbody = $("experiments").tBodies[0];
  etbody.replaceChildren(...exps.slice().reverse().map((e) => {
    const members = list.filter((j) => j.experiment_id === e.id);
    const tr = document.createElement("tr");
    tr.id = `exp-${e.id}`;
    tr.insertCell().textContent = e.name;
    ownerCell(tr, e.owner);
    tr.insertCell().textContent = e.baseline;
    const counts = {};
    for (const j of members) counts[j.state] = (counts[j.state] || 0) + 1;
    tr.insertCell().textContent = Object.entries(counts).map(([s, n]) => `${n} ${s}`).join(", ") || "–";
    const cell = tr.insertCell();
    if (members.length && members.every((j) => TERMINAL.has(j.state))) {
      const a = document.createElement("a");
      a.href = `#report-${e.id}`;
      a.className = "report-link";
      a.textContent = "report";
      a.addEventListener("click", (ev) => { ev.preventDefault(); showReport(e).catch((err) => showError(err.message)); });
      cell.append(a);
      if (members.some((j) => j.state === "succeeded")) {
        const full = document.createElement("a");
        full.href = `#full-report-${e.id}`;
        full.className = "report-html-link";
        full.textContent = "open full report";
        full.setAttribute("aria-label", `full report of ${e.name} with figures (opens a new tab)`);
        full.addEventListener("click", (ev) => { ev.preventDefault(); openFullReport(e); });
        cell.append(" · ", full);
      }
    } else {
      cell.textContent = "when every job has finished";
    }
    return tr;
  }));
  for (const j of list) follow(j);
  if (!selected) {
    const running = list.find((j) => j.kind === "train" && j.state === "running") || list.find((j) => j.kind === "train");
    if (running) select(running.id);
  } else {
    drawLoss();
  }
}

function init() {
  $("empty-curl").textContent = `curl -X POST ${location.origin}/v1/experiments -H "Authorization: Bearer $TOKEN" \\\n  -H 'Content-Type: application/json' \\\n  -d '{"name": "first", "config": "examples/configs/demo-tiny.yaml", "variants": ["vanilla", "dea"]}'`;
  $("signin").addEventListener("submit", (e) => { e.preventDefault(); signIn($("token").value.trim()); });
  $("signout").addEventListener("click", signOut);
  if (token()) signIn(token());
  setInterval(refresh, 3000);
  document.body.dataset.ready = "1";
}

init();
