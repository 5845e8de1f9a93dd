// isochron dashboard. Polls /api/v1/overview once a second; rates are differences of the server's
// counters between polls (over the server's own timestamps), kept for the last 60 s and drawn as
// canvas line charts. No framework, no network beyond this server.
"use strict";

const POLL_MS = 1000;
const MIN_GAP_MS = 200; // between an answer and the next request (the server does the pacing)
const WINDOW_S = 60;
const SMOOTH_S = 5; // disk and cache rates: mean over the last 5 s
const COLORS = ["#4fb3ff", "#3ecf8e", "#f5b942", "#ff6b6b", "#b18cff", "#ff9f5a", "#5ee0e0", "#e879c6"];

const params = new URLSearchParams(location.search);
const reportUrl = params.get("report");

const state = {
  updates: 0,
  prev: null,        // the previous overview
  history: [],       // [{t, nodes:{name:bytes sent}, control:{name:control bytes sent}, disks:{name:bytes read}, cache:{B_disk, B_cache}}]
  sessionRate: {},   // session id -> bit/s
};

// ---- formatting: every number carries its unit ----

function fmtInt(n) {
  return Math.round(n).toLocaleString("en-US");
}
function fmtBytes(b) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(b) >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (i === 0 ? fmtInt(b) : b.toFixed(b < 10 ? 2 : 1)) + " " + units[i];
}
function fmtBits(bps) {
  if (bps >= 1e9) return (bps / 1e9).toFixed(2) + " Gb/s";
  if (bps >= 1e6) return (bps / 1e6).toFixed(2) + " Mb/s";
  if (bps >= 1e3) return (bps / 1e3).toFixed(1) + " kb/s";
  return fmtInt(bps) + " b/s";
}
function fmtMiBs(bytesPerS) {
  return (bytesPerS / 1048576).toFixed(2) + " MiB/s";
}
function fmtClock(s) {
  s = Math.max(0, s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  const mm = String(m).padStart(2, "0"), ss = sec.toFixed(1).padStart(4, "0");
  return (h > 0 ? h + ":" + mm : m) + ":" + ss;
}
function fmtDuration(s) {
  if (s < 60) return s.toFixed(0) + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + Math.floor(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}
function fmtPct(x) {
  return (100 * x).toFixed(1) + " %";
}
function fmtTime(ms) {
  const d = new Date(ms);
  return d.toTimeString().slice(0, 8);
}

// ---- DOM helpers ----

function $(id) { return document.getElementById(id); }
function setText(id, text, value) {
  const el = $(id);
  el.textContent = text;
  if (value !== undefined) el.dataset.value = String(value);
}
function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}
function fillTable(id, rows, emptyText, colspan) {
  const body = $(id).tBodies[0];
  const frag = document.createDocumentFragment();
  if (rows.length === 0 && emptyText) {
    const tr = document.createElement("tr");
    tr.className = "empty";
    const td = cell(emptyText);
    td.colSpan = colspan;
    tr.appendChild(td);
    frag.appendChild(tr);
  }
  for (const r of rows) frag.appendChild(r);
  body.replaceChildren(frag);
}

// ---- rates ----

function rate(now, prev, get) {
  if (!prev) return null;
  const dt = (now.time_unix_ms - prev.time_unix_ms) / 1000;
  if (dt <= 0) return null;
  const d = get(now) - get(prev);
  return d < 0 ? null : d / dt; // a counter that went down: the server restarted
}

// Each poll adds the counters the charts need; rates are computed when drawing, over a trailing
// window of SMOOTH_S seconds (disks read whole blocks, so one-second rates are spiky).
function record(o) {
  const p = state.prev;
  const sample = { t: o.time_unix_ms / 1000, nodes: {}, control: {}, disks: {}, cache: {} };
  for (const n of o.nodes) {
    sample.nodes[n.name] = n.payload_bytes_sent;
    sample.control[n.name] = n.control_bytes_sent || 0;
  }
  for (const d of o.disks) if (d.state !== "retired") sample.disks["disk " + d.id] = d.read_bytes;
  sample.cache["disk (B_disk)"] = o.totals.disk_bytes;
  sample.cache["cache (B_cache)"] = o.totals.cache_bytes;
  const last = state.history[state.history.length - 1];
  if (!last || sample.t > last.t) state.history.push(sample);
  const cutoff = sample.t - WINDOW_S - SMOOTH_S - 2;
  while (state.history.length && state.history[0].t < cutoff) state.history.shift();

  const prevSessions = {};
  if (p) for (const s of p.sessions) prevSessions[s.id] = s;
  const dt = p ? (o.time_unix_ms - p.time_unix_ms) / 1000 : 0;
  const rates = {};
  for (const s of o.sessions) {
    const q = prevSessions[s.id];
    if (q && dt > 0 && s.bytes_sent >= q.bytes_sent) rates[s.id] = ((s.bytes_sent - q.bytes_sent) * 8) / dt;
  }
  state.sessionRate = rates;
}

// The rate of counter `name` of group `key` at history index i, per second, over the trailing
// window; null without an earlier sample or across a counter reset.
function windowRate(key, name, i, windowS) {
  const h = state.history, now = h[i];
  if (now[key][name] === undefined) return null;
  let j = i;
  while (j > 0 && now.t - h[j - 1].t <= windowS + 0.25 && h[j - 1][key][name] !== undefined) j--;
  if (j === i) return null;
  const d = now[key][name] - h[j][key][name];
  return d < 0 ? null : d / (now.t - h[j].t);
}

// ---- charts ----

// One line per counter of group `key`, as rates times `scale`.
function series(key, scale, windowS, colors) {
  const names = new Set();
  for (const h of state.history) for (const k of Object.keys(h[key])) names.add(k);
  return [...names].sort().map((name, n) => ({
    name,
    color: (colors || COLORS)[n % (colors || COLORS).length],
    points: state.history.map((h, i) => {
      const r = windowRate(key, name, i, windowS);
      return [h.t, r === null ? null : r * scale];
    }),
  }));
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 4, 6, 8, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function drawChart(canvas, lines, unit, legendId) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || canvas.width, h = canvas.clientHeight || canvas.height;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const pad = { l: 70, r: 12, t: 10, b: 24 };
  const pw = w - pad.l - pad.r, ph = h - pad.t - pad.b;
  const now = state.history.length ? state.history[state.history.length - 1].t : Date.now() / 1000;
  const t0 = now - WINDOW_S;
  let max = 0;
  for (const s of lines) for (const [, v] of s.points) if (v !== null && v > max) max = v;
  max = niceMax(max * 1.1);
  const x = (t) => pad.l + ((t - t0) / WINDOW_S) * pw;
  const y = (v) => pad.t + ph - (v / max) * ph;

  ctx.font = "11px system-ui, sans-serif";
  ctx.strokeStyle = "#2a323d";
  ctx.fillStyle = "#8b96a5";
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4, yy = Math.round(y(v)) + 0.5;
    ctx.beginPath(); ctx.moveTo(pad.l, yy); ctx.lineTo(pad.l + pw, yy); ctx.stroke();
    ctx.fillText(String(+v.toFixed(2)) + " " + unit, pad.l - 6, yy);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  for (let s = 0; s <= WINDOW_S; s += 15) {
    const xx = Math.round(x(t0 + s)) + 0.5;
    ctx.beginPath(); ctx.moveTo(xx, pad.t); ctx.lineTo(xx, pad.t + ph); ctx.stroke();
    ctx.fillText(s === WINDOW_S ? "now" : "−" + (WINDOW_S - s) + " s", xx, pad.t + ph + 6);
  }

  ctx.save();
  ctx.beginPath(); ctx.rect(pad.l, pad.t, pw, ph); ctx.clip();
  ctx.lineWidth = 2;
  ctx.lineJoin = "round";
  for (const s of lines) {
    ctx.strokeStyle = s.color;
    ctx.beginPath();
    let pen = false;
    for (const [t, v] of s.points) {
      if (v === null) { pen = false; continue; }
      if (pen) ctx.lineTo(x(t), y(v)); else ctx.moveTo(x(t), y(v));
      pen = true;
    }
    ctx.stroke();
  }
  ctx.restore();

  const legend = $(legendId);
  const items = lines.map((s) => {
    const span = document.createElement("span");
    const sw = document.createElement("span");
    sw.className = "sw";
    sw.style.background = s.color;
    const last = [...s.points].reverse().find((p) => p[1] !== null);
    span.appendChild(sw);
    span.appendChild(document.createTextNode(s.name + ": " + (last ? last[1].toFixed(2) : "—") + " " + unit));
    return span;
  });
  legend.replaceChildren(...items);
}

// ---- rendering ----

function render(o) {
  const t = o.totals, p = state.prev;
  const node = o.nodes[0];
  setText("node-name", node ? node.name + " · " + o.nodes.length + " node" + (o.nodes.length === 1 ? "" : "s") : "—");
  setText("version", node ? "v" + node.version : "");
  setText("uptime", node ? "up " + fmtDuration(node.uptime_s) : "");

  setText("t-sessions", fmtInt(t.sessions) + " sessions", t.sessions);
  setText("t-sessions-sub", fmtInt(t.playing) + " playing · " + fmtInt(t.streams) + " streams · " + fmtInt(t.objects) + " objects");
  const send = rate(o, p, (x) => x.totals.payload_bytes_sent);
  setText("t-send-rate", send === null ? "—" : fmtBits(send * 8), send === null ? 0 : Math.round(send * 8));
  const committed = o.nodes.reduce((a, n) => a + n.playing_bitrate_bps, 0);
  setText("t-send-rate-sub", "nominal " + fmtBits(committed) + " playing");
  setText("t-packets", fmtInt(t.packets_sent) + " pkts", t.packets_sent);
  const pps = rate(o, p, (x) => x.totals.packets_sent);
  setText("t-bytes", fmtBytes(t.payload_bytes_sent) + (pps === null ? "" : " · " + fmtInt(pps) + " pkt/s"), t.payload_bytes_sent);
  const diskRate = windowRate("cache", "disk (B_disk)", state.history.length - 1, SMOOTH_S);
  setText("t-disk-rate", diskRate === null ? "—" : fmtMiBs(diskRate), diskRate === null ? 0 : Math.round(diskRate));
  setText("t-disk-bytes", "5 s mean · " + fmtBytes(t.disk_bytes) + " total", t.disk_bytes);
  const served = t.disk_bytes + t.cache_bytes;
  const ratio = served > 0 ? t.cache_bytes / served : 0;
  setText("t-cache-ratio", served > 0 ? fmtPct(ratio) : "—", ratio.toFixed(4));
  setText("t-cache-sub", fmtBytes(t.cache_bytes) + " from cache · " + fmtBytes(t.cache_used_bytes) + " held");
  setText("t-missed", fmtInt(t.missed_deadlines) + " blocks", t.missed_deadlines);
  setText("t-missed-sub", fmtInt(t.underruns) + " underruns · max late " + (t.packet_lateness_max_s * 1000).toFixed(1) + " ms");
  const a = o.admission;
  setText("t-admission", fmtInt(a.accepts_total) + " ✓ / " + fmtInt(a.rejects_total) + " ✗");
  setText("t-admission-sub", "policy " + a.policy);

  // Sessions.
  setText("sessions-count", fmtInt(o.sessions.length) + " total");
  const rows = o.sessions.map((s) => {
    const tr = document.createElement("tr");
    tr.dataset.session = s.id;
    tr.dataset.object = s.object;
    tr.dataset.packets = String(s.packets_sent);
    const r = state.sessionRate[s.id];
    tr.append(
      cell(s.id, "mono"),
      cell(s.object),
      cell(s.state),
      cell(s.transport.toUpperCase()),
      cell(s.client || "—", "mono"),
      cell(r === undefined ? "—" : fmtBits(r), "num"),
      cell(fmtBits(s.bitrate_bps), "num"),
      cell(fmtClock(s.position_s), "num"),
      cell(s.pace.toFixed(2) + "×", "num"),
      cell(fmtInt(s.packets_sent) + " pkts", "num"),
      cell(fmtInt(s.blocks_delivered) + " blk", "num"),
      cell(fmtInt(s.missed_deadlines) + " blk", s.missed_deadlines > 0 ? "num bad" : "num"),
    );
    return tr;
  });
  fillTable("sessions", rows, "No sessions.", 12);

  // Disks.
  const dt = p ? (o.time_unix_ms - p.time_unix_ms) / 1000 : 0;
  const diskRows = o.disks.map((d) => {
    const q = p && p.disks.find((x) => x.id === d.id);
    const readRate = q && dt > 0 && d.read_bytes >= q.read_bytes ? (d.read_bytes - q.read_bytes) / dt : null;
    const busy = q && dt > 0 ? (d.rt_busy_s + d.nrt_busy_s - q.rt_busy_s - q.nrt_busy_s) / dt : null;
    const tr = document.createElement("tr");
    tr.dataset.disk = String(d.id);
    tr.append(
      cell("disk " + d.id),
      cell(d.state),
      cell(d.path + (d.model ? " (" + d.model + ")" : ""), "mono"),
      cell(fmtInt(d.queue) + " IOs", "num"),
      cell(readRate === null ? "—" : fmtMiBs(readRate), "num"),
      cell(busy === null ? "—" : fmtPct(Math.min(1, Math.max(0, busy))), "num"),
      cell(d.utilisation === null || d.utilisation === undefined ? "—" : fmtPct(d.utilisation), "num"),
      cell(fmtBytes(d.read_bytes), "num"),
    );
    return tr;
  });
  fillTable("disks", diskRows, "No disks.", 8);

  // Reorganisation.
  const rg = o.reorg;
  const box = $("reorg");
  box.dataset.state = rg.state;
  $("reorg-fill").style.width = (rg.state === "idle" && rg.total === 0 ? 0 : 100 * rg.fraction).toFixed(1) + "%";
  let text;
  if (rg.state === "running") {
    text = (rg.operation || "reorganising") + ": " + fmtInt(rg.moved) + " of " + fmtInt(rg.total) + " blocks moved (" +
      fmtPct(rg.fraction) + ", " + fmtBytes(rg.bytes) + ", " + rg.rate_mib_s.toFixed(2) + " MiB/s, " + fmtInt(rg.remaining) + " blocks left)";
  } else if (rg.state === "failed") {
    text = "failed: " + (rg.error || "unknown error");
  } else if (rg.total > 0) {
    text = "idle · last: " + (rg.operation || "reorganisation") + ", " + fmtInt(rg.moved) + " blocks (" + fmtBytes(rg.bytes) + ") in " + rg.elapsed_s.toFixed(1) + " s";
  } else {
    text = "idle · no reorganisation since start";
  }
  setText("reorg-text", text);

  // Ladder jobs, newest first.
  const jobs = (o.transcode || []).slice().reverse().map((j) => {
    const tr = document.createElement("tr");
    tr.dataset.state = j.state;
    tr.append(
      cell(j.title),
      cell(j.rungs.join(", ")),
      cell(j.state === "failed" ? "failed: " + (j.error || "") : j.state, j.state === "failed" ? "bad" : ""),
      cell((j.nodes || []).join(", ")),
      cell(fmtPct(j.progress), "num"),
      cell(j.seconds.toFixed(1) + " s", "num"),
    );
    return tr;
  });
  fillTable("transcode", jobs, "No ladder jobs.", 6);

  // Feeds being published: who publishes (to admins), what, to how many, at what rate
  // against the rate admitted.
  const feeds = (o.live || []).map((f) => {
    const tr = document.createElement("tr");
    tr.dataset.feed = f.name;
    tr.dataset.viewers = String(f.viewers);
    tr.append(
      cell(f.name),
      cell((f.publisher || "—") + " · " + f.transport, "mono"),
      cell(f.tracks.join(", ")),
      cell(fmtInt(f.viewers), "num"),
      cell(fmtDuration(f.recorded_s) + " · " + fmtInt(f.blocks) + " blk", "num"),
      cell(fmtBits(f.bit_rate_bps), "num"),
      cell(fmtBits(f.admitted_bps), "num"),
    );
    return tr;
  });
  fillTable("feeds", feeds, "No live feeds.", 7);

  // Admission decisions.
  setText("admission-policy", a.policy + " policy");
  const adm = a.decisions.map((d) => {
    const tr = document.createElement("tr");
    tr.dataset.verdict = d.verdict;
    const verdict = cell(d.verdict === "admit" ? "admitted" : "rejected", d.verdict === "admit" ? "" : "bad");
    const reason = cell(d.reason ? d.reason.replace(/_/g, " ") : "—");
    if (d.detail) reason.title = d.detail;
    tr.append(cell(fmtTime(d.time_unix_ms), "mono"), cell(d.object), cell(d.kind), cell(fmtBits(d.rate_bps), "num"), verdict, reason);
    return tr;
  });
  fillTable("admission", adm, "No decisions yet.", 6);

  drawCharts();
  setText("last-update", fmtTime(o.time_unix_ms));
}

function drawCharts() {
  // Node-to-node traffic only exists in a cluster.
  const cluster = state.history.some((h) => Object.keys(h.control).length > 1);
  $("card-control").hidden = !cluster;
  drawChart($("chart-nodes"), series("nodes", 8 / 1e6, 1), "Mb/s", "legend-nodes");
  drawChart($("chart-control"), series("control", 8 / 1e3, SMOOTH_S), "kb/s", "legend-control");
  drawChart($("chart-disks"), series("disks", 1 / 1048576, SMOOTH_S), "MiB/s", "legend-disks");
  const cacheColors = [COLORS[1], COLORS[2]];
  drawChart($("chart-cache"), series("cache", 1 / 1048576, SMOOTH_S, cacheColors), "MiB/s", "legend-cache");
}

function report(o) {
  if (!reportUrl) return;
  const summary = {
    updates: state.updates,
    sessions: o.sessions.map((s) => s.id),
    objects: o.sessions.map((s) => s.object),
    packets_sent: o.totals.packets_sent,
    payload_bytes_sent: o.totals.payload_bytes_sent,
    rendered_rows: document.querySelectorAll("#sessions tbody tr[data-session]").length,
  };
  fetch(reportUrl, { method: "POST", body: JSON.stringify(summary), mode: "no-cors" }).catch(() => {});
}

async function poll() {
  const live = $("live");
  try {
    // The server holds the answer until a second after the previous one: polls stay evenly
    // spaced in server time whatever this tab's timers do.
    const after = state.prev ? "?after=" + (state.prev.time_unix_ms + POLL_MS) : "";
    const r = await fetch("/api/v1/overview" + after, { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    const o = await r.json();
    record(o);
    render(o);
    state.prev = o;
    state.updates += 1;
    document.body.dataset.updates = String(state.updates);
    document.body.dataset.state = "live";
    live.textContent = "live";
    live.className = "pill pill-ok";
    report(o);
    setTimeout(poll, MIN_GAP_MS);
  } catch (e) {
    document.body.dataset.state = "offline";
    live.textContent = "offline: " + e.message;
    live.className = "pill pill-bad";
    setTimeout(poll, POLL_MS);
  }
}

window.addEventListener("resize", drawCharts);
poll();
