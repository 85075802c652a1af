/* larbin_py dashboard: polls /stats.json and renders it.
 *
 * Everything that came from the crawl is written with textContent or
 * createElement, never parsed as HTML, so a URL such as
 * "<script>alert(1)</script>" shows as text.  Charts are drawn on canvas.
 */
"use strict";
(function () {
  const POLL_MS = 1000;
  const COLORS = ["#4fb3ff", "#ff6b6b", "#f0b429", "#3fcf8e", "#c084fc", "#fb923c",
                  "#22d3ee", "#f472b6", "#a3e635", "#94a3b8"];
  const $ = (id) => document.getElementById(id);
  let latest = null;

  function setText(id, text) {
    const el = $(id);
    if (el && el.textContent !== text) el.textContent = text;
  }
  function num(x) { return typeof x === "number" && isFinite(x); }
  function fmtInt(n) { return num(n) ? Math.round(n).toLocaleString("en-US") : "–"; }
  function fmtRate(x) { return num(x) ? (x >= 100 ? x.toFixed(0) : x.toFixed(1)) : "–"; }
  function fmtBytes(n) {
    if (!num(n)) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
  }
  function fmtDuration(s) {
    if (!num(s)) return "–";
    s = Math.max(0, Math.floor(s));
    const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, sec = s % 60;
    const pad = (v) => String(v).padStart(2, "0");
    return h ? h + "h " + pad(m) + "m " + pad(sec) + "s" : m ? m + "m " + pad(sec) + "s" : sec + "s";
  }
  function fmtMs(sec) { return num(sec) ? (sec * 1000).toFixed(1) + " ms" : "–"; }
  function fmtClock(t) { return num(t) ? new Date(t * 1000).toLocaleTimeString("en-GB") : "–"; }
  function onOff(id, value, on, off) {
    const el = $(id);
    if (!el) return;
    el.textContent = value ? on : off;
    el.className = value ? "on" : "off";
  }

  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }
  function fillTable(id, rows, build) {
    const body = $(id);
    if (!body) return;
    const frag = document.createDocumentFragment();
    for (const row of rows || []) {
      const tr = document.createElement("tr");
      build(tr, row);
      frag.appendChild(tr);
    }
    body.replaceChildren(frag);
  }
  function urlCell(tr, url) {
    const td = document.createElement("td");
    td.className = "url";
    const text = String(url);
    if (/^https?:\/\//i.test(text)) {
      const a = document.createElement("a");
      a.href = text;                 // http(s) only: never javascript:
      a.rel = "noreferrer noopener";
      a.target = "_blank";
      a.textContent = text;
      td.appendChild(a);
    } else {
      td.textContent = text;
    }
    tr.appendChild(td);
  }

  function render(s) {
    latest = s;
    const state = $("state");
    state.textContent = s.state || "?";
    state.className = "badge " + (s.state || "");
    setText("uptime", fmtDuration(s.uptime));
    const p = s.pages || {}, u = s.urls || {}, d = s.dns || {}, c = s.connections || {};
    const si = s.sites || {}, pr = s.process || {}, f = s.flow || {}, g = s.gate || {};
    setText("pages-fetched", fmtInt(p.fetched));
    setText("pages-rate-now", fmtRate(p.rate_now));
    setText("pages-rate-avg", fmtRate(p.rate_avg));
    setText("bytes-fetched", fmtBytes(p.bytes));
    setText("bytes-rate", num(p.bytes_rate_now) ? fmtBytes(p.bytes_rate_now) + "/s" : "–");
    setText("pages-limit", num(p.limit) ? fmtInt(p.limit) : "none");
    setText("urls-taken", fmtInt(u.taken));
    setText("urls-seen", fmtInt(u.seen));
    setText("urls-queued-disk", fmtInt(u.queued_disk));
    setText("urls-in-memory", fmtInt(u.in_memory));
    setText("urls-in-flight", fmtInt(u.in_flight));
    setText("urls-retry-wait", fmtInt(u.retry_wait));
    setText("urls-fetched", fmtInt(u.fetched));
    const forgotten = Object.entries(u.forgotten || {}).sort((a, b) => b[1] - a[1]);
    setText("urls-forgotten", fmtInt(forgotten.reduce((t, e) => t + e[1], 0)));
    onOff("gate-is-get", g.is_get, "open (loading)", "closed (full)");
    onOff("flow-enabled", f.enabled, "on", "off");
    setText("flow-srtt", fmtMs(f.srtt));
    setText("flow-rtt-min", fmtMs(f.rtt_min));
    setText("flow-rtt-max", fmtMs(f.rtt_max));
    setText("flow-max-requests", fmtInt(f.max_requests));
    setText("conn-open", fmtInt(c.open));
    setText("conn-max", fmtInt(c.max));
    const meter = $("conn-meter");
    meter.max = Math.max(1, c.max || 1);
    meter.value = c.open || 0;
    setText("sites-known", fmtInt(si.known));
    setText("sites-ready", fmtInt(si.ready));
    setText("sites-waiting", fmtInt(si.waiting));
    setText("dns-in-flight", fmtInt(d.in_flight));
    setText("dns-queued", fmtInt(d.queued));
    setText("dns-queries", fmtInt(d.queries));
    setText("dns-cache-hits", fmtInt(d.cache_hits));
    setText("dns-failures", fmtInt(d.failures));
    setText("rss", fmtBytes(pr.rss_bytes));
    setText("cpu", num(pr.cpu_seconds) ? pr.cpu_seconds.toFixed(1) + " s" : "–");
    setText("limit-time", num(s.limit_time) ? fmtDuration(s.limit_time) : "none");
    setText("last-update", fmtClock(s.time));

    // Progress towards the end of the crawl (page limit or time limit).
    let frac = null;
    if (num(p.limit) && p.limit > 0) frac = p.fetched / p.limit;
    if (num(s.limit_time) && s.limit_time > 0) frac = Math.max(frac || 0, s.uptime / s.limit_time);
    $("limit-box").hidden = frac === null;
    if (frac !== null) {
      $("limit-progress").value = Math.min(1, frac);
      setText("limit-text", Math.min(100, frac * 100).toFixed(0) + "%");
    }

    fillTable("forgotten-body", forgotten, (tr, e) => { cell(tr, e[0]); cell(tr, fmtInt(e[1]), "num"); });
    const hosts = s.hosts || {};
    fillTable("busiest-body", hosts.busiest, (tr, h) => { cell(tr, String(h.host)); cell(tr, fmtInt(h.pages), "num"); });
    fillTable("failing-body", hosts.failing, (tr, h) => { cell(tr, String(h.host)); cell(tr, fmtInt(h.errors), "num err"); });
    fillTable("last-body", s.last, (tr, l) => {
      cell(tr, fmtClock(l.time));
      cell(tr, l.status == null ? "–" : String(l.status), "num" + (l.status >= 400 || l.status == null ? " err" : ""));
      cell(tr, String(l.reason || ""), l.reason ? "err" : "");
      cell(tr, fmtBytes(l.bytes), "num");
      urlCell(tr, l.url);
    });
    renderCluster(s.cluster);
    const an = s.analysis;
    $("alerts-card").hidden = !an;
    if (an) {
      const al = an.alerts || {};
      setText("analysis-pending", fmtInt(an.pending));
      setText("analysis-finished", fmtInt(an.finished));
      setText("analysis-failed", fmtInt(an.failed));
      setText("alerts-count", fmtInt(al.count));
      fillTable("alerts-body", (al.recent || []).slice().reverse(), (tr, a) => {
        cell(tr, fmtClock(a.time));
        cell(tr, String(a.analyzer || a.kind || ""));
        cell(tr, fmtInt(a.tries), "num");
        cell(tr, String(a.error || ""), "err");
        urlCell(tr, a.url || "");
      });
    }
    drawCharts();
  }

  // ---- the distributed mode: membership, workers, Redis lost ----------

  function renderCluster(cl) {
    $("cluster-card").hidden = !cl;
    const down = cl && cl.redis_down ? cl.redis_down : null;
    const why = [];
    if (down && down.launcher) why.push(String(down.launcher));
    if (down && down.workers && down.workers.length) why.push("workers " + down.workers.map(String).join(", ") + " report it");
    $("redis-banner").hidden = why.length === 0;
    setText("redis-banner-text", why.join("; "));
    if (!cl) return;
    const m = cl.membership || {};
    const members = (m.members || []).map(String);
    setText("cluster-crawl", String(cl.crawl == null ? "–" : cl.crawl));
    setText("cluster-membership", String(m.source || "–"));
    setText("cluster-members", members.length + (members.length ? ": " + members.join(", ") : ""));
    const lc = m.last_change;
    setText("cluster-last-change", lc ? fmtClock(lc.at) + " · " + String(lc.what || "") +
            (lc.worker ? " (seen by " + String(lc.worker) + ")" : "") : "none yet");
    setText("cluster-out", (m.out || []).length ? m.out.map(String).join(", ") : "none");
    fillTable("cluster-workers-body", cl.workers, (tr, w) => {
      cell(tr, String(w.worker));
      cell(tr, w.live ? "yes" : "no", w.live ? "" : "err");
      cell(tr, String(w.state || ""));
      cell(tr, fmtInt(w.pages), "num");
      cell(tr, fmtRate(w.rate_now), "num");
      cell(tr, fmtInt(w.partitions), "num");
      cell(tr, fmtInt(w.ip_leases), "num");
      cell(tr, w.redis_down ? String(w.redis_down) : "ok", w.redis_down ? "err" : "");
    });
  }

  // ---- charts ---------------------------------------------------------

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function legend(id, series) {
    const box = $(id);
    if (!box) return;
    const frag = document.createDocumentFragment();
    for (const s of series) {
      const item = document.createElement("span");
      const sw = document.createElement("i");
      sw.style.background = s.color;   // CSSOM: allowed by the CSP
      item.appendChild(sw);
      item.appendChild(document.createTextNode(s.label));
      frag.appendChild(item);
    }
    box.replaceChildren(frag);
  }

  function chart(id, times, series, fmt) {
    const canvas = $(id);
    if (!canvas) return;
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (!w || !h) return;
    if (canvas.width !== Math.round(w * dpr)) canvas.width = Math.round(w * dpr);
    if (canvas.height !== Math.round(h * dpr)) canvas.height = Math.round(h * dpr);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    let max = 0;
    for (const s of series) for (const v of s.values) if (num(v) && v > max) max = v;
    max = niceMax(max);
    ctx.font = "11px system-ui, sans-serif";
    // The y-axis labels decide the left margin: "97.7 KiB/s" must not be cut.
    const labels = [0, 1, 2, 3, 4].map((i) => fmt((max * i) / 4));
    const widest = Math.max(...labels.map((t) => ctx.measureText(t).width));
    const left = Math.max(40, Math.ceil(widest) + 12), right = 8, top = 8, bottom = 20;
    const pw = w - left - right, ph = h - top - bottom;
    ctx.fillStyle = "#8a98a8";
    ctx.strokeStyle = "#2a3642";
    ctx.lineWidth = 1;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let i = 0; i <= 4; i++) {
      const y = top + ph - (ph * i) / 4;
      ctx.beginPath(); ctx.moveTo(left, Math.round(y) + 0.5); ctx.lineTo(left + pw, Math.round(y) + 0.5); ctx.stroke();
      ctx.fillText(labels[i], left - 6, y);
    }
    const n = times.length;
    const t0 = n ? times[0] : 0, t1 = n ? times[n - 1] : 1;
    const span = Math.max(t1 - t0, 1);
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (let i = 0; i <= 4; i++) {
      const ago = span * (1 - i / 4);
      ctx.textAlign = i === 4 ? "right" : "center";  // "now" ends at the plot's edge, not past the canvas
      ctx.fillText(i === 4 ? "now" : "-" + fmtDuration(ago), left + (pw * i) / 4, top + ph + 5);
    }
    ctx.textAlign = "center";
    if (n === 0) {
      ctx.fillText("waiting for data…", left + pw / 2, top + ph / 2);
      return;
    }
    const x = (t) => left + (pw * (t - t0)) / span;
    const y = (v) => top + ph - (ph * v) / max;
    for (const s of series) {
      ctx.strokeStyle = s.color;
      ctx.lineWidth = 1.6;
      ctx.beginPath();
      let pen = false;
      for (let i = 0; i < n; i++) {
        const v = s.values[i];
        if (!num(v)) { pen = false; continue; }
        if (pen) ctx.lineTo(x(times[i]), y(v)); else ctx.moveTo(x(times[i]), y(v));
        pen = true;
      }
      ctx.stroke();
    }
  }

  function drawCharts() {
    const hist = latest && latest.history;
    if (!hist) return;
    const t = hist.time || [];
    const pages = [{ label: "pages/s", color: COLORS[0], values: hist.pages_rate || [] }];
    chart("chart-pages", t, pages, fmtRate);
    legend("legend-pages", pages);
    const bytes = [{ label: "bytes/s", color: COLORS[3], values: hist.bytes_rate || [] }];
    chart("chart-bytes", t, bytes, (v) => fmtBytes(v) + "/s");
    legend("legend-bytes", bytes);
    const sums = Object.entries(hist.errors || {})
      .map(([reason, values]) => [reason, values, values.reduce((a, b) => a + (b || 0), 0)])
      .sort((a, b) => b[2] - a[2]).slice(0, COLORS.length);
    const errors = sums.map((e, i) => ({ label: e[0], color: COLORS[(i + 1) % COLORS.length], values: e[1] }));
    chart("chart-errors", t, errors, fmtRate);
    legend("legend-errors", errors.length ? errors : [{ label: "no errors yet", color: "#2a3642" }]);
    const ms = (vals) => (vals || []).map((v) => (num(v) ? v * 1000 : null));
    const rtt = [
      { label: "smoothed RTT (ms)", color: COLORS[2], values: ms(hist.srtt) },
      { label: "max requests", color: COLORS[4], values: hist.max_requests || [] },
      { label: "open connections", color: COLORS[0], values: hist.open_connections || [] },
    ];
    chart("chart-rtt", t, rtt, (v) => v.toFixed(v >= 10 ? 0 : 1));
    legend("legend-rtt", rtt);
  }

  // ---- polling --------------------------------------------------------

  function status(ok, text) {
    const el = $("conn-status");
    el.textContent = text;
    el.className = ok ? "meta" : "meta down";
  }

  async function poll() {
    try {
      const r = await fetch("/stats.json", { cache: "no-store" });
      if (!r.ok) throw new Error("HTTP " + r.status);
      render(await r.json());
      status(true, "live");
    } catch (e) {
      status(false, "disconnected (" + e.message + ")");
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  window.addEventListener("resize", drawCharts);
  poll();
})();
