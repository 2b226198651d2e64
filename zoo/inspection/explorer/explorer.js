// zoo explorer: draws the data collected by zoo/inspection/explorer/collect.py. Vanilla JS, no network.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("zoo-data").textContent);
  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const FONT = '11px system-ui, "Noto Sans CJK KR", "Noto Sans KR", "Apple SD Gothic Neo", "Malgun Gothic", sans-serif';

  // ----- packed arrays (pack.py): base64 little-endian float16 or uint16 fixed point
  function half(h) {
    const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, f = h & 0x3ff;
    if (e === 0) return s * Math.pow(2, -14) * (f / 1024);
    if (e === 31) return f ? NaN : s * Infinity;
    return s * Math.pow(2, e - 15) * (1 + f / 1024);
  }
  function unpack(p) {
    const bin = atob(p.b64), n = bin.length / 2, out = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const u = bin.charCodeAt(2 * i) | (bin.charCodeAt(2 * i + 1) << 8);
      out[i] = p.dtype === "f16" ? half(u) : u / p.scale;
    }
    return { values: out, shape: p.shape };
  }

  // ----- colours
  const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function ramp(stops, x) {
    x = Math.min(1, Math.max(0, x)) * (stops.length - 1);
    const i = Math.min(stops.length - 2, Math.floor(x)), t = x - i, a = stops[i], b = stops[i + 1];
    return `rgb(${a.map((v, j) => Math.round(v + t * (b[j] - v))).join(",")})`;
  }
  const seq = (x) => ramp(VIRIDIS, x);
  const div = (x) => ramp([[33, 102, 172], [247, 247, 247], [178, 24, 43]], (x + 1) / 2);  // x in [-1, 1]

  // A labelled heatmap on a canvas: cell(i, j) -> colour; returns geometry for hit-testing.
  function heatmap(canvas, rows, cols, cell, rowLabels, colLabels, colour) {
    const ctx = canvas.getContext("2d");
    ctx.font = FONT;
    const widest = (labels) => Math.max(0, ...(labels || []).map((l) => ctx.measureText(l).width));
    const left = Math.min(140, widest(rowLabels) + 8), top = Math.min(110, widest(colLabels) + 8);
    canvas.width = left + cols * cell + 4;
    canvas.height = top + rows * cell + 4;
    ctx.font = FONT;
    for (let i = 0; i < rows; i++)
      for (let j = 0; j < cols; j++) { ctx.fillStyle = colour(i, j); ctx.fillRect(left + j * cell, top + i * cell, cell, cell); }
    ctx.fillStyle = "#1d2330";
    ctx.textBaseline = "middle";
    if (rowLabels) { ctx.textAlign = "right"; rowLabels.forEach((l, i) => ctx.fillText(l, left - 4, top + (i + 0.5) * cell)); }
    if (colLabels) {
      ctx.textAlign = "left";
      colLabels.forEach((l, j) => {
        ctx.save(); ctx.translate(left + (j + 0.5) * cell, top - 4); ctx.rotate(-Math.PI / 2); ctx.fillText(l, 0, 0); ctx.restore();
      });
    }
    return { left, top, cell, rows, cols };
  }

  // ----- header and tokens
  $("title").textContent = D.title;
  $("source").textContent = D.source;
  for (const n of D.notes) $("notes").appendChild(el("li", {}, n));
  const labels = {};
  for (const [stream, toks] of Object.entries(D.tokens)) {
    labels[stream] = toks.map((t) => t.label);
    const box = $("token-streams");
    box.appendChild(el("div", { class: "stream-name" }, `${stream} (${toks.length} tokens)`));
    const row = el("div", { class: "token-row", "data-stream": stream });
    toks.forEach((t, i) => {
      const chip = el("span", { class: "tok", title: `position ${i}, id ${t.id}` });
      chip.appendChild(el("span", { class: "label" }, t.label));
      chip.appendChild(el("span", { class: "id" }, String(t.id)));
      row.appendChild(chip);
    });
    box.appendChild(row);
  }

  // ----- attention
  const A = {};
  // a kind left out by the size budget has weights null; a kept one may hold some layers / heads only
  for (const [kind, a] of Object.entries(D.attention)) if (a.weights) A[kind] = Object.assign({}, a, unpack(a.weights));
  const kindSel = $("attn-kind"), layerSel = $("attn-layer"), headSel = $("attn-head");
  const attnState = { hover: -1, geo: null };
  function fill(select, items) {
    select.innerHTML = "";
    for (const [value, text] of items) select.appendChild(el("option", { value: String(value) }, text));
  }
  function attnMatrix() {
    const a = A[kindSel.value], [L, H, Tq, Tk] = a.shape;
    const li = Number(layerSel.value), h = headSel.value;
    const at = (hh, i, j) => a.values[((li * H + hh) * Tq + i) * Tk + j];
    const get = h === "mean" ? (i, j) => { let s = 0; for (let k = 0; k < H; k++) s += at(k, i, j); return s / H; }
      : (i, j) => at(Number(h), i, j);
    return { get, Tq, Tk, q: labels[a.q] || [], k: labels[a.k] || [] };
  }
  function drawAttention() {
    const m = attnMatrix(), canvas = $("attn-canvas");
    const cell = Math.max(8, Math.min(26, Math.floor(520 / Math.max(m.Tq, m.Tk))));
    let most = 1e-9;  // colour scale 0..max of this map: untrained or diffuse heads stay readable
    for (let i = 0; i < m.Tq; i++) for (let j = 0; j < m.Tk; j++) most = Math.max(most, m.get(i, j));
    attnState.geo = heatmap(canvas, m.Tq, m.Tk, cell, m.q, m.k, (i, j) => seq(m.get(i, j) / most));
    $("attn-scale").textContent = `colour: 0 (dark) .. ${most.toFixed(3)} (yellow), the largest weight in this map`;
    canvas.dataset.kind = kindSel.value; canvas.dataset.layer = layerSel.value; canvas.dataset.head = headSel.value;
    const g = attnState.geo, ctx = canvas.getContext("2d");
    if (attnState.hover >= 0 && attnState.hover < m.Tq) {
      ctx.strokeStyle = "#ff2d55"; ctx.lineWidth = 2;
      ctx.strokeRect(g.left - 1, g.top + attnState.hover * g.cell - 1, g.cols * g.cell + 2, g.cell + 2);
    }
    showLooks(m);
  }
  function showLooks(m) {
    const keys = $("attn-keys"), q = attnState.hover;
    keys.innerHTML = "";
    if (q < 0 || q >= m.Tq) { $("attn-readout").textContent = "hover a query row"; return; }
    const w = [];
    for (let j = 0; j < m.Tk; j++) w.push(m.get(q, j));
    const top = w.map((v, j) => [v, j]).sort((x, y) => y[0] - x[0]).slice(0, 4)
      .map(([v, j]) => `${m.k[j] ?? j} (${j}) ${v.toFixed(3)}`);
    $("attn-readout").textContent = `query "${m.q[q] ?? q}" (position ${q}) looks at: ${top.join(", ")}`;
    const most = Math.max(...w, 1e-9);
    w.forEach((v, j) => {
      const chip = el("span", { class: "tok", title: `weight ${v.toFixed(4)}` });
      chip.style.background = `rgba(47, 111, 223, ${(v / most).toFixed(3)})`;
      if (v / most > 0.55) chip.style.color = "#fff";
      chip.appendChild(el("span", { class: "label" }, m.k[j] ?? String(j)));
      chip.appendChild(el("span", { class: "id" }, v.toFixed(2)));
      keys.appendChild(chip);
    });
  }
  function setKind() {
    const a = A[kindSel.value];
    fill(layerSel, a.layers.map((l, i) => [i, `layer ${l}`]));
    const mean = a.heads.length < a.n_heads ? `mean of the ${a.heads.length} stored heads` : "mean of heads";
    fill(headSel, a.heads.map((h, i) => [i, `head ${h}`]).concat([["mean", mean]]));
    attnState.hover = -1;
    drawAttention();
  }
  const kinds = Object.keys(A);
  const kindNames = { encoder: "encoder self-attention", decoder: "decoder self-attention", cross: "cross-attention (decoder → encoder)" };
  if (kinds.length) {
    fill(kindSel, kinds.map((k) => [k, kindNames[k] || k]));
    kindSel.addEventListener("change", setKind);
    layerSel.addEventListener("change", drawAttention);
    headSel.addEventListener("change", drawAttention);
    $("attn-canvas").addEventListener("mousemove", (ev) => {
      const g = attnState.geo, r = ev.target.getBoundingClientRect();
      const row = Math.floor((ev.clientY - r.top - g.top) / g.cell);
      const q = row >= 0 && row < g.rows ? row : -1;
      if (q !== attnState.hover) { attnState.hover = q; drawAttention(); }
    });
    document.querySelectorAll("#token-streams .token-row").forEach((row) => {
      [...row.children].forEach((chip, i) => chip.addEventListener("mouseenter", () => {
        if (row.dataset.stream !== A[kindSel.value].q) return;  // only the current map's query stream
        attnState.hover = i;
        drawAttention();
      }));
    });
    setKind();
  } else {
    $("attention").appendChild(el("p", {}, Object.keys(D.attention).length
      ? "The attention weights were left out to stay within html_max_mb (see the notes at the top)."
      : "This model has no attention layers to show."));
  }

  // ----- masks
  const maskName = { mask: "self-attention mask", local_mask: "sliding-window mask", cross_mask: "cross-attention mask" };
  for (const m of D.masks) {
    const what = maskName[m.name] || m.name;
    if (!m.values) {  // left out by the size budget
      $("mask-list").appendChild(el("p", { class: "hint" }, `${m.stream}: ${what} left out to stay within html_max_mb.`));
      continue;
    }
    const u = unpack(m.values), [Tq, Tk] = u.shape;
    let bias = 0;
    for (const v of u.values) if (isFinite(v)) bias = Math.max(bias, Math.abs(v));
    const fig = el("figure"), canvas = el("canvas");
    const cell = Math.max(6, Math.min(18, Math.floor(300 / Math.max(Tq, Tk))));
    heatmap(canvas, Tq, Tk, cell, labels[m.q], labels[m.k], (i, j) => {
      const v = u.values[i * Tk + j];
      if (!isFinite(v)) return "#2b2f3a";
      return bias > 0 ? ramp([[255, 255, 255], [150, 190, 235]], Math.abs(v) / bias) : "#f4f4f0";
    });
    fig.appendChild(canvas);
    const extra = bias > 0 ? `; bias up to ${bias.toFixed(2)}${m.heads > 1 ? " (head 0 of " + m.heads + ")" : ""}` : "";
    fig.appendChild(el("figcaption", {}, `${m.stream}: ${what} (${Tq}×${Tk})${extra}`));
    $("mask-list").appendChild(fig);
  }
  if (!D.masks.length) $("mask-list").appendChild(el("p", {}, "No mask recorded: every query sees every key."));

  // ----- positional pattern
  (function () {
    const P = D.positional, body = $("pos-body");
    if (!P.values) { body.appendChild(el("p", {}, P.note)); return; }
    const u = unpack(P.values), [n, f] = u.shape;
    let most = 1e-9;
    for (const v of u.values) most = Math.max(most, Math.abs(v));
    const fig = el("figure"), canvas = el("canvas", { id: "pos-canvas" });
    const cw = Math.max(2, Math.min(24, Math.floor(640 / f))), ch = Math.max(2, Math.min(8, Math.floor(320 / n)));
    canvas.width = f * cw; canvas.height = n * ch;
    const ctx = canvas.getContext("2d");
    for (let i = 0; i < n; i++) for (let j = 0; j < f; j++) { ctx.fillStyle = div(u.values[i * f + j] / most); ctx.fillRect(j * cw, i * ch, cw, ch); }
    fig.appendChild(canvas);
    fig.appendChild(el("figcaption", {}, `positional=${P.scheme}: rows = positions 0..${n - 1}, columns = ${P.xlabel}` +
      (f < P.features ? ` (${f} of ${P.features}, evenly spaced)` : "") + `; blue < 0 < red, |max| ${most.toFixed(3)}`));
    body.appendChild(fig);
  })();

  // ----- next-token distribution: zoo.generation.logits (temperature -> top-k -> top-p), then softmax
  const L = Object.assign({}, D.logits, D.logits.values ? unpack(D.logits.values) : { values: new Float64Array(0) });
  const V = L.vocab_size;
  function logitsAt(slot) { return Array.from(L.values.subarray(slot * V, (slot + 1) * V)); }
  function softmax(x) {
    let m = -Infinity;
    for (const v of x) if (v > m) m = v;
    const e = x.map((v) => (v === -Infinity ? 0 : Math.exp(v - m)));
    const s = e.reduce((a, b) => a + b, 0);
    return e.map((v) => v / s);
  }
  function distribution(slot, temperature, topK, topP) {
    let x = logitsAt(slot);
    if (temperature === 0) {  // greedy: all mass on the first arg-max
      let best = 0;
      x.forEach((v, i) => { if (v > x[best]) best = i; });
      return x.map((_, i) => (i === best ? 1 : 0));
    }
    if (temperature !== 1) {  // a loop, not Math.max(...x): spreading a 100k+ vocabulary overflows the stack
      let m = -Infinity;
      for (const v of x) if (v > m) m = v;
      x = x.map((v) => (v - m) / temperature);
    }
    if (topK > 0 && topK < V) {
      const kth = [...x].sort((a, b) => b - a)[topK - 1];
      x = x.map((v) => (v < kth ? -Infinity : v));
    }
    if (topP < 1) {
      const order = x.map((v, i) => i).sort((a, b) => x[b] - x[a] || a - b);
      const probs = softmax(order.map((i) => x[i]));
      let before = 0;
      const drop = new Array(V).fill(false);
      order.forEach((i, r) => { if (before >= topP) drop[i] = true; before += probs[r]; });
      x = x.map((v, i) => (drop[i] ? -Infinity : v));
    }
    return softmax(x);
  }
  const posSel = $("dist-pos"), tIn = $("temperature"), kIn = $("top-k"), pIn = $("top-p");
  const tokOf = L.stream === "input" ? () => "whole input" : (i) => (labels[L.stream] || [])[i] ?? String(i);
  fill(posSel, L.positions.map((p, slot) => [slot, `${p}: ${tokOf(p)}`]));
  posSel.value = String(L.positions.length - 1);
  function drawDistribution() {
    const slot = Number(posSel.value), t = Number(tIn.value), k = Math.max(0, Math.floor(Number(kIn.value) || 0));
    const p = Number(pIn.value);
    $("temperature-value").textContent = t.toFixed(2);
    $("top-p-value").textContent = p.toFixed(2);
    const probs = distribution(slot, t, k, p), raw = logitsAt(slot);
    const ranked = raw.map((v, i) => i).sort((a, b) => raw[b] - raw[a] || a - b).filter((i) => L.labels[i] !== undefined)
      .slice(0, L.top);
    const kept = probs.filter((v) => v > 0).length;
    $("dist-summary").textContent = `${kept} of ${V} tokens can be drawn; top ${ranked.length} by logit shown` +
      ` (T=${t.toFixed(2)}, top-k=${k || "off"}, top-p=${p < 1 ? p.toFixed(2) : "off"})`;
    const body = $("dist-table").querySelector("tbody");
    body.innerHTML = "";
    const most = Math.max(...ranked.map((i) => probs[i]), 1e-12);
    for (const i of ranked) {
      const tr = el("tr", { class: probs[i] > 0 ? "kept" : "cut", "data-id": String(i) });
      tr.appendChild(el("td", { class: "label" }, L.labels[i]));
      tr.appendChild(el("td", { class: "id" }, String(i)));
      tr.appendChild(el("td", { class: "p" }, probs[i].toFixed(4)));
      const barCell = el("td"), bar = el("div", { class: "bar" });
      bar.style.width = `${Math.round(260 * probs[i] / most)}px`;
      barCell.appendChild(bar); tr.appendChild(barCell); body.appendChild(tr);
    }
  }
  if (L.positions.length) {
    for (const input of [posSel, tIn, kIn, pIn]) input.addEventListener("input", drawDistribution);
    posSel.addEventListener("change", drawDistribution);
    kIn.max = String(V);
    drawDistribution();
  } else {  // left out by the size budget
    $("dist-summary").textContent = "The logits were left out to stay within html_max_mb (see the notes at the top).";
  }

  // ----- greedy vs beam tree (SVG)
  (function () {
    const B = D.beams, body = $("beam-body");
    if (!B.nodes) { body.appendChild(el("p", {}, B.note)); return; }
    const NS = "http://www.w3.org/2000/svg";
    const svgEl = (tag, attrs, text) => {
      const e = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
      if (text !== undefined) e.textContent = text;
      return e;
    };
    const kids = B.nodes.map(() => []);
    for (const n of B.nodes) if (n.parent !== null) kids[n.parent].push(n.id);
    const onPath = (n) => n.paths.length > 0;
    for (const k of kids) k.sort((a, b) => (onPath(B.nodes[b]) - onPath(B.nodes[a])) || (B.nodes[b].logp - B.nodes[a].logp));
    const y = new Array(B.nodes.length);
    let leaf = 0;
    (function place(id) {
      if (!kids[id].length) { y[id] = leaf++; return; }
      kids[id].forEach(place);
      y[id] = (y[kids[id][0]] + y[kids[id][kids[id].length - 1]]) / 2;
    })(0);
    const DX = 118, DY = 30, W = (Math.max(...B.nodes.map((n) => n.depth)) + 1) * DX + 40, H = leaf * DY + 20;
    const svg = svgEl("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, id: "beam-svg" });
    const colour = (n) => (n.paths.includes("greedy") && n.paths.some((p) => p.startsWith("beam")) ? "#7b4fd6"
      : n.paths.includes("greedy") ? "var(--greedy)" : onPath(n) ? "var(--accent)" : "#b8bfcc");
    const px = (n) => 10 + n.depth * DX, py = (n) => 14 + y[n.id] * DY;
    for (const n of B.nodes) {
      if (n.parent === null) continue;
      const p = B.nodes[n.parent];
      svg.appendChild(svgEl("path", { d: `M${px(p) + 70},${py(p)} C${px(p) + 92},${py(p)} ${px(n) - 22},${py(n)} ${px(n)},${py(n)}`,
        fill: "none", stroke: colour(n), "stroke-width": onPath(n) ? 2.5 : 1, "stroke-dasharray": onPath(n) ? "" : "4 3" }));
      svg.appendChild(svgEl("text", { x: px(n) - 24, y: py(n) - 5, "text-anchor": "middle", fill: "#5b6475", "font-size": 10 },
        n.logp.toFixed(2)));
    }
    for (const n of B.nodes) {
      const g = svgEl("g", { class: "beam-node", "data-node": n.id });
      g.appendChild(svgEl("rect", { x: px(n), y: py(n) - 10, width: 70, height: 20, rx: 4, fill: "#fff", stroke: colour(n),
        "stroke-width": onPath(n) ? 2 : 1 }));
      const text = n.label.length > 9 ? n.label.slice(0, 8) + "…" : n.label;
      g.appendChild(svgEl("text", { x: px(n) + 35, y: py(n) + 4, "text-anchor": "middle", fill: onPath(n) ? "#1d2330" : "#8a92a3" }, text));
      g.appendChild(svgEl("title", {}, `${n.label} (id ${n.token ?? "-"}) log p ${n.logp.toFixed(4)}, cumulative ${n.cum.toFixed(4)}` +
        (n.paths.length ? `; on ${n.paths.join(", ")}` : "; not taken")));
      svg.appendChild(g);
    }
    const wrap = el("div", { class: "attn-wrap" });
    wrap.appendChild(svg);
    body.appendChild(wrap);
    const table = el("table", { class: "grid", id: "beam-table" });
    table.innerHTML = "<thead><tr><th>hypothesis</th><th>tokens</th><th>Σ log p</th>" +
      `<th>zoo beam score (Σ log p / len^${B.length_penalty})</th></tr></thead>`;
    const tb = el("tbody");
    for (const h of B.hypotheses) {
      const tr = el("tr");
      const sw = el("span", { class: "legend-swatch" });
      sw.style.background = h.name === "greedy" ? "var(--greedy)" : "var(--accent)";
      const name = el("td"); name.appendChild(sw); name.appendChild(document.createTextNode(h.name)); tr.appendChild(name);
      tr.appendChild(el("td", {}, h.labels.join(" ")));
      tr.appendChild(el("td", { class: "num" }, h.sum_logp.toFixed(4)));
      tr.appendChild(el("td", { class: "num" }, h.score === undefined ? "" : h.score.toFixed(4)));
      tb.appendChild(tr);
    }
    table.appendChild(tb);
    body.appendChild(table);
    body.appendChild(el("p", { class: "hint" }, `num_beams=${B.num_beams}, max_new_tokens=${B.max_new_tokens}, ` +
      `stop ids ${B.eos.join(", ")}; purple = shared by greedy and a beam.`));
  })();

  // ----- shape trace
  (function () {
    const layers = [...new Set(D.trace.map((r) => r.layer).filter((l) => l !== null))].sort((a, b) => a - b);
    const sel = $("trace-layer");
    fill(sel, [["all", "all layers"], ...layers.map((l) => [l, `layer ${l}`])]);
    sel.value = layers.length ? String(layers[0]) : "all";
    function draw() {
      const body = $("trace-table").querySelector("tbody");
      body.innerHTML = "";
      D.trace.forEach((r, i) => {
        if (sel.value !== "all" && r.layer !== null && String(r.layer) !== sel.value) return;
        const tr = el("tr");
        for (const v of [i, r.stream, r.layer ?? "", r.name, `[${r.shape.join(", ")}]`, r.module, r.kind]) tr.appendChild(el("td", {}, String(v)));
        body.appendChild(tr);
      });
    }
    sel.addEventListener("change", draw);
    draw();
  })();

  // ----- experts per token (Mixture-of-Experts layers)
  (function () {
    const body = $("experts-body");
    if (!D.experts || !D.experts.length) {
      body.appendChild(el("p", { class: "readout" }, "This model has no Mixture-of-Experts layer (model.ffn is not moe)."));
      return;
    }
    for (const stream of [...new Set(D.experts.map((layer) => layer.stream))]) {  // one table per stream
      const t = el("table", { class: "grid experts-table", "data-stream": stream });
      const head = el("tr");
      head.appendChild(el("th", {}, `${stream} layer`));
      for (const label of labels[stream] || []) head.appendChild(el("th", {}, label));
      const thead = el("thead");
      thead.appendChild(head);
      t.appendChild(thead);
      const tb = el("tbody");
      for (const layer of D.experts.filter((l) => l.stream === stream)) {
        const tr = el("tr");
        tr.appendChild(el("td", {}, layer.layer));
        layer.experts.forEach((chosen, i) => {
          const text = chosen.map((e, k) => `e${e} ${layer.weights[i][k].toFixed(2)}`).join(" / ");
          tr.appendChild(el("td", { title: `${stream} position ${i}` }, text));
        });
        tb.appendChild(tr);
      }
      t.appendChild(tb);
      body.appendChild(t);
    }
  })();

  // ----- parameter and FLOP tables
  (function () {
    const fmt = (n) => n.toLocaleString("en-US");
    const total = Math.max(D.params.total, 1);
    const t1 = el("table", { class: "grid", id: "param-table" });
    t1.innerHTML = "<caption>parameters (tied weights once)</caption><thead><tr><th>component</th><th>parameters</th><th>share</th></tr></thead>";
    const b1 = el("tbody");
    for (const [name, n] of Object.entries(D.params)) {
      const tr = el("tr");
      tr.appendChild(el("td", {}, name));
      tr.appendChild(el("td", { class: "num" }, fmt(n)));
      tr.appendChild(el("td", { class: "num" }, `${(100 * n / total).toFixed(1)}%`));
      b1.appendChild(tr);
    }
    t1.appendChild(b1);
    const F = D.flops, t2 = el("table", { class: "grid", id: "flop-table" });
    t2.innerHTML = `<caption>FLOPs per token (T = ${F.seq_len}): ${F.formula}</caption><thead><tr><th>quantity</th><th>value</th></tr></thead>`;
    const b2 = el("tbody");
    for (const [name, v] of [["N_matmul", F.n_matmul], ["attention sub-layers", F.n_attn], ["d_attn", F.d_attn],
      ["attention term", F.attention], ["forward", F.forward], ["training (fwd + bwd)", F.training]]) {
      const tr = el("tr");
      tr.appendChild(el("td", {}, name));
      tr.appendChild(el("td", { class: "num" }, fmt(v)));
      b2.appendChild(tr);
    }
    t2.appendChild(b2);
    $("counts-body").appendChild(t1);
    $("counts-body").appendChild(t2);
  })();

  window.zooExplorer = { data: D, distribution, unpack, drawAttention };
  document.body.dataset.ready = "1";
})();
