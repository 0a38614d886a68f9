/**
 * @module The operators' page (`GET <admin.path>`): one HTML document with inline CSS and JS, no
 * build step and no external assets. It holds no data: it asks the admin API (same origin, with the
 * token typed into it) and shows a key's limits (and its routes' budgets, its calendar quotas) as bars, its credits and
 * its usage this month, and its longest window's grants as a chart; or the same of an address's budgets (`ip`,
 * `anonymous`, `guess`) or an account's.
 */

import type { Config } from "../../config/types.ts";
import { MINT_SECTION, mintScript } from "./page-mint.ts";

/** The page as the admin API serves it (`GET <admin.path>`), with headers that keep it to its own origin. */
export function page(config: Config): Response {
  const signed = config.plans.filter((p) => p.signed).map((p) => p.name);
  return new Response(adminPage(config.admin.path, signed), {
    headers: {
      "content-type": "text/html; charset=utf-8",
      "cache-control": "no-store",
      // Inline script and style only; the page talks to its own origin and nothing else.
      "content-security-policy":
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
      "referrer-policy": "no-referrer",
      "x-content-type-options": "nosniff",
    },
  });
}

/** The page, calling the admin API under `path`, with a form minting keys for the `signed` plans (when any). */
export function adminPage(path: string, signed: readonly string[] = []): string {
  return PAGE.replace("__ADMIN_PATH__", JSON.stringify(path).replace(/</g, "\\u003c"))
    .replace("__MINT_SECTION__", MINT_SECTION)
    .replace("__MINT_SCRIPT__", mintScript(signed));
}

const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>Rate limiter · operators</title>
<style>
  :root { --fg: #1d2330; --muted: #5d6678; --line: #d9dee7; --bg: #f6f7f9; --card: #fff; --ok: #2f7d4f; --warn: #b7791f; --bad: #c0392b; --accent: #2b5fd9; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Liberation Sans", sans-serif; color: var(--fg); background: var(--bg); }
  header { padding: 14px 24px; background: #1d2330; color: #fff; }
  header h1 { margin: 0; font-size: 17px; font-weight: 600; }
  main { max-width: 920px; margin: 0 auto; padding: 20px 24px 40px; }
  section { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 16px 18px; margin-bottom: 16px; }
  h2 { font-size: 14px; margin: 0 0 12px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); }
  form.row, .row { display: flex; flex-wrap: wrap; gap: 10px; align-items: end; }
  label { display: flex; flex-direction: column; gap: 4px; font-size: 12px; color: var(--muted); }
  input, textarea { font: inherit; padding: 7px 9px; border: 1px solid var(--line); border-radius: 6px; min-width: 0; }
  input[name=key] { width: 280px; } input[name=token] { width: 220px; }
  select { font: inherit; padding: 6px 8px; border: 1px solid var(--line); border-radius: 6px; background: #fff; }
  button { font: inherit; padding: 7px 14px; border-radius: 6px; border: 1px solid var(--accent); background: var(--accent); color: #fff; cursor: pointer; }
  button.secondary { background: #fff; color: var(--accent); }
  button.danger { border-color: var(--bad); background: var(--bad); }
  button:disabled { opacity: .5; cursor: default; }
  #message { min-height: 20px; margin: 0 0 12px; }
  #message.error { color: var(--bad); } #message.ok { color: var(--ok); }
  .facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 0 0 14px; }
  .facts dt { color: var(--muted); } .facts dd { margin: 0; font-weight: 500; }
  .limit { margin: 10px 0 14px; }
  .limit .head { display: flex; justify-content: space-between; font-size: 13px; margin-bottom: 4px; }
  .bar { height: 14px; background: #e8ebf1; border-radius: 7px; overflow: hidden; }
  .bar > div { height: 100%; background: var(--ok); border-radius: 7px; transition: width .2s; }
  .bar > div.high { background: var(--warn); } .bar > div.full { background: var(--bad); }
  .badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; background: #e8ebf1; }
  .badge.bad { background: #fbe3e0; color: var(--bad); } .badge.warn { background: #fdf0d9; color: var(--warn); }
  svg { width: 100%; height: 180px; display: block; }
  .caption { color: var(--muted); font-size: 12px; margin-top: 4px; }
  .actions { display: grid; gap: 12px; }
  [hidden] { display: none !important; }
</style>
</head>
<body>
<header><h1>Rate limiter · operators</h1></header>
<main>
  <section>
    <form id="lookup" class="row" autocomplete="off">
      <label>Admin token<input name="token" type="password" required placeholder="ADMIN_TOKEN"></label>
      <label>Budget of<select name="subject">
        <option value="key">an API key</option>
        <option value="ip">an address (ip)</option>
        <option value="anonymous">an address (anonymous)</option>
        <option value="guess">an address (refused keys)</option>
        <option value="account">an account</option>
      </select></label>
      <label>Key, address or account<input name="key" required placeholder="live_… or 192.0.2.1" spellcheck="false"></label>
      <label>Plan (ip, account; optional)<input name="plan" size="10" spellcheck="false"></label>
      <button type="submit">Look up</button>
    </form>
  </section>
  <p id="message" role="status"></p>
  __MINT_SECTION__
  <div id="result" hidden>
    <section>
      <h2 id="subject-title">Key</h2>
      <dl class="facts">
        <dt>Key id</dt><dd id="key-id"></dd>
        <dt>Plan</dt><dd id="plan"></dd>
        <dt>Block</dt><dd id="block"></dd>
        <dt>Override</dt><dd id="override"></dd>
        <dt>Credits</dt><dd id="credits"></dd>
        <dt>This month</dt><dd id="month"></dd>
        <dt>As of</dt><dd id="now"></dd>
      </dl>
      <div id="limits"></div>
    </section>
    <section>
      <h2 id="chart-title">Grants over the longest window</h2>
      <svg id="chart" role="img" aria-label="grants over time"></svg>
      <div class="caption" id="chart-caption"></div>
    </section>
    <section class="actions">
      <h2>Steer</h2>
      <div class="row">
        <button id="reset" class="secondary" type="button" title="Empties the key's windows (its routes' too) and its penalty count; blocks, overrides, quotas, credits and usage stay">Reset windows</button>
        <label>Block for<input id="block-for" value="10m" size="6"></label>
        <button id="do-block" class="danger" type="button">Block</button>
        <button id="unblock" class="secondary" type="button">Unblock</button>
      </div>
      <div class="row">
        <label>Override limits (JSON, as in RATE_LIMIT.limits)<textarea id="override-limits" rows="2" cols="48" spellcheck="false">[{"limit": 1000, "window": "1m"}]</textarea></label>
        <label>Expires after (optional)<input id="override-for" placeholder="1d" size="6"></label>
        <button id="do-override" type="button">Override</button>
        <button id="remove-override" class="secondary" type="button">Remove override</button>
      </div>
      <div class="row" id="credit-row" hidden>
        <label>Add credits<input id="credit-add" value="1000" size="8" inputmode="numeric"></label>
        <button id="do-credit" type="button">Add</button>
      </div>
    </section>
  </div>
</main>
<script>
"use strict";
const BASE = __ADMIN_PATH__;
const $ = (id) => document.getElementById(id);
const form = $("lookup");
let current = null;

// Whose budget the page is about: {"key"}, {"ip"} (with "plan" for a plan's own), {"anonymous"}, {"guess"} or
// {"account"} (with "plan" when several plans have account limits), as the API takes it (docs/operating.md, "API").
function subject() {
  const kind = form.elements.subject.value;
  const s = { [kind]: form.elements.key.value.trim() };
  const plan = form.elements.plan.value.trim();
  if (plan && (kind === "ip" || kind === "account")) s.plan = plan;
  return s;
}

function say(text, kind) { const m = $("message"); m.textContent = text; m.className = kind || ""; }
function ms(n) {
  if (n < 1000) return n + " ms";
  const s = n / 1000;
  if (s < 120) return (Math.round(s * 10) / 10) + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  return Math.round(s / 360) / 10 + " h";
}

async function call(action, body) {
  const token = form.elements.token.value;
  const res = await fetch(BASE + action, {
    method: "POST",
    headers: { "authorization": "Bearer " + token, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw Object.assign(new Error((data.title || res.status) + ": " + (data.detail || res.statusText)), { status: res.status });
  return data;
}

function el(tag, attrs, text) {
  const e = document.createElementNS(tag === "svg" || attrs.svg ? "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml", tag);
  for (const [k, v] of Object.entries(attrs)) if (k !== "svg") e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function render(s) {
  current = s;
  $("result").hidden = false;
  $("subject-title").textContent = form.elements.subject.selectedOptions[0].textContent.replace(/^an? (.)/, (_, c) => c.toUpperCase());
  $("key-id").textContent = s.key_id + (s.stored ? "" : " (no stored state)");
  $("plan").textContent = s.plan + (s.unlimited ? " (unlimited)" : "") + (s.in_flight ? " · " + s.in_flight + " in flight" : "");
  const block = $("block");
  block.replaceChildren(s.block ? el("span", { class: "badge bad" }, (s.block.cause === "penalty" ? "penalty: " : "") + "blocked until " + new Date(s.block.until_ms).toLocaleString() + " (" + ms(s.block.remaining_ms) + " left)") : el("span", { class: "badge" }, s.refusals ? s.refusals + " refusals towards a penalty" : "none"));
  const ov = $("override");
  ov.replaceChildren(s.override ? el("span", { class: "badge warn" }, s.override.limits.map((l) => l.limit + " per " + ms(l.window_ms)).join(", ") + (s.override.expires ? " until " + new Date(s.override.expires_ms).toLocaleString() : " (no expiry)")) : el("span", { class: "badge" }, "none"));
  $("now").textContent = s.now ? new Date(s.now_ms).toLocaleString() : "—";
  $("credits").textContent = s.credits ? s.credits.balance + " left" : "none";
  $("credit-row").hidden = !s.credits;
  month(s);
  const box = $("limits");
  box.replaceChildren();
  // The key's limits, then each route's (docs/configuration.md, "Per-route budgets").
  const routed = (s.routes || []).flatMap((r) => r.limits.map((l) => Object.assign({}, l, { route: (r.method ? r.method + " " : "") + (r.path || r.name) })));
  // Calendar quotas after them (docs/configuration.md, "Quotas and credits").
  const quotas = (s.quotas || []).map((q) => Object.assign({}, q, { quota: true }));
  for (const l of s.limits.concat(routed, quotas)) {
    const pct = l.limit > 0 ? Math.min(100, (100 * l.used) / l.limit) : 0;
    const row = el("div", { class: "limit", "data-limit": l.name });
    const head = el("div", { class: "head" });
    const per = l.quota ? "per " + l.period + " (" + l.time_zone + ")" : "per " + ms(l.window_ms);
    head.append(el("strong", {}, l.name + " · " + l.limit + " " + per + (l.source === "override" ? " (override)" : l.route ? " (route " + l.route + ")" : "")));
    const grows = l.quota ? (l.resets_at_ms ? " · resets " + new Date(l.resets_at_ms).toLocaleString() : "") : (l.reset_ms > 0 ? " · grows in " + ms(l.reset_ms) : "");
    head.append(el("span", { class: "usage" }, l.used + " used · " + l.remaining + " left" + grows));
    const bar = el("div", { class: "bar", role: "meter", "aria-valuemin": "0", "aria-valuemax": String(l.limit), "aria-valuenow": String(l.used) });
    bar.append(el("div", { class: pct >= 100 ? "full" : pct >= 80 ? "high" : "", style: "width:" + pct + "%" }));
    row.append(head, bar);
    box.append(row);
  }
  if (s.unlimited) box.append(el("p", {}, "Unlimited plan: its requests never consult the limiter."));
  chart(s.history);
}

// The key's usage this month, for a plan that keeps it (docs/operating.md, "Usage").
async function month(s) {
  const box = $("month");
  if (!s.usage) { box.textContent = "no usage kept"; return; }
  box.textContent = "…";
  try {
    const u = await call("usage", { key: form.elements.key.value.trim(), period: "month", from: s.now_ms });
    const p = u.periods[u.periods.length - 1];
    box.textContent = p ? p.requests + " requests, cost " + p.cost + " (" + u.time_zone + ")" : "nothing yet";
  } catch (e) { box.textContent = e.message; }
}

function chart(h) {
  const svg = $("chart");
  svg.replaceChildren();
  if (!h) { $("chart-caption").textContent = "No window to show."; return; }
  $("chart-title").textContent = "Grants over the last " + ms(h.window_ms) + " (" + h.limit + ")";
  const W = 860, H = 180, pad = 28, n = h.counts.length;
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  const max = Math.max(1, ...h.counts);
  const bw = (W - pad - 8) / n;
  svg.append(el("line", { svg: 1, x1: pad, y1: H - 20, x2: W - 4, y2: H - 20, stroke: "#98a1b3" }));
  svg.append(el("text", { svg: 1, x: 2, y: 12, "font-size": 11, fill: "#5d6678" }, String(max)));
  svg.append(el("text", { svg: 1, x: 2, y: H - 22, "font-size": 11, fill: "#5d6678" }, "0"));
  svg.append(el("text", { svg: 1, x: pad, y: H - 4, "font-size": 11, fill: "#5d6678" }, "−" + ms(h.window_ms)));
  svg.append(el("text", { svg: 1, x: W - 30, y: H - 4, "font-size": 11, fill: "#5d6678" }, "now"));
  h.counts.forEach((c, i) => {
    if (c === 0) return;
    const bh = ((H - 40) * c) / max;
    const r = el("rect", { svg: 1, x: pad + i * bw + 1, y: H - 20 - bh, width: Math.max(1, bw - 2), height: bh, fill: "#2b5fd9", "data-count": c });
    r.append(el("title", { svg: 1 }, c + " in " + ms(h.bucket_ms)));
    svg.append(r);
  });
  const total = h.counts.reduce((a, b) => a + b, 0);
  $("chart-caption").textContent = total + " granted in the window, " + ms(h.bucket_ms) + " per bar" + (h.ahead ? "; " + h.ahead + " leased ahead" : "") + ".";
}

async function act(action, extra, done) {
  if (!current) return;
  try {
    const s = await call(action, Object.assign(subject(), extra));
    render(s);
    say(typeof done === "function" ? done(s) : done, "ok");
    return null;
  } catch (e) { say(e.message, "error"); return e; }
}

// Each top-up carries an id of its own, so the API adds it once however often it arrives (docs/operating.md, "The
// page"). The button is off while one is in flight; one that got no answer (a network error, 503) keeps its id, so
// clicking again for the same key and amount retries it rather than adding twice.
let topUp = null;
function randomId() {
  return "page-" + Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
}
async function addCredits() {
  const button = $("do-credit");
  if (button.disabled) return;
  const key = form.elements.key.value.trim();
  const add = Number($("credit-add").value.trim());
  if (!topUp || topUp.key !== key || topUp.add !== add) topUp = { key, add, id: randomId() };
  button.disabled = true;
  const failed = await act("credits", { add, id: topUp.id }, (s) => s.applied === false ? "Already applied: nothing added." : "Credits added.");
  // Answered (done, or refused as bad input): the next click is a new top-up.
  if (!failed || (failed.status && failed.status !== 503)) topUp = null;
  button.disabled = false;
}

form.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  say("Looking up…");
  try { render(await call("status", subject())); say("", ""); }
  catch (e) { $("result").hidden = true; current = null; say(e.message, "error"); }
});
$("reset").addEventListener("click", () => act("reset", {}, "Windows reset."));
$("do-block").addEventListener("click", () => act("block", { for: $("block-for").value.trim() }, "Blocked."));
$("unblock").addEventListener("click", () => act("unblock", {}, "Unblocked."));
$("do-override").addEventListener("click", () => {
  let limits;
  try { limits = JSON.parse($("override-limits").value); } catch (e) { say("Override limits: not valid JSON", "error"); return; }
  const f = $("override-for").value.trim();
  act("override", f ? { limits, for: f } : { limits }, "Override set.");
});
$("remove-override").addEventListener("click", () => act("override/delete", {}, "Override removed."));
$("do-credit").addEventListener("click", addCredits);
__MINT_SCRIPT__
</script>
</body>
</html>
`;
