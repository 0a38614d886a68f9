/**
 * @module The operators' API and page under `RATE_LIMIT.admin.path` (default `/__limiter/`),
 * present only while the secret `ADMIN_TOKEN` is set (docs/operating.md). Every call but the
 * page needs `Authorization: Bearer <ADMIN_TOKEN>`; the key travels in the JSON body, never in
 * the URL. Admin requests are never proxied and never counted.
 */

import { clientOf } from "../base/address.ts";
import { LimiterError } from "../base/errors.ts";
import { keyId, logEvent } from "../base/log.ts";
import { withDeadline } from "../client/policy.ts";
import { routeBudget } from "../config/lookup.ts";
import { parseLimits } from "../config/parse.ts";
import { type AddressBudget, type Config, ConfigError, type Limit, type Plan } from "../config/types.ts";
import type { CreditSpec } from "../core/credits.ts";
import type { LimitStatus, NamedLimit } from "../core/decision.ts";
import { describe, parseDuration } from "../core/duration.ts";
import { usageCsv } from "../core/usage.ts";
import { type KeyStatus, MAX_TIME_MS, type Override, type RateLimiter } from "../object/index.ts";
import { HttpError, problem } from "../pipeline/http.ts";
import { BEARER, checkKey, type Identity, identify, objectName } from "../pipeline/key.ts";
import type { LimiterStub } from "../protocol.ts";
import { adminPage } from "./admin-page.ts";
import { objectsOf } from "./objects.ts";

/** The bindings the admin API reads. */
export interface AdminEnv {
  /** The operators' bearer token (a secret); unset: no admin API, the paths are ordinary traffic. */
  readonly ADMIN_TOKEN?: string;
  readonly LIMITER: DurableObjectNamespace<RateLimiter>;
}

/** What the Worker lends the admin API. */
export interface AdminContext {
  /** Drops what this isolate holds for the key (leases, a cached denial) after an operator's change. */
  forget(name: string): void;
  /** The clock (ms) that times given with `for` start from, and that `until`/`expires` must lie after. */
  now(): number;
}

/** The largest request body the admin API reads (bytes); larger ones get `413`. */
export const MAX_BODY_BYTES = 8192;
/** Buckets in `history` (the longest window's grants over time). */
export const HISTORY_BUCKETS = 60;

/**
 * Whether the admin API answers `request`: only while `ADMIN_TOKEN` is set, for a path under
 * `admin.path`, or for any request that carries the admin token (it is never proxied, whatever its
 * path: a near-miss of the admin path must not send the token to the origin). `path` is the
 * request's normalised path (src/base/path.ts).
 */
export async function isAdminRequest(request: Request, path: string, env: AdminEnv, config: Config): Promise<boolean> {
  if (!env.ADMIN_TOKEN) return false;
  if (path.startsWith(config.admin.path)) return true;
  return BEARER.test(request.headers.get("authorization") ?? "") && (await authorized(request, env.ADMIN_TOKEN));
}

type Action = "status" | "reset" | "block" | "unblock" | "override" | "override/delete" | "credits" | "usage";
const ACTIONS: readonly Action[] = [
  "status",
  "reset",
  "block",
  "unblock",
  "override",
  "override/delete",
  "credits",
  "usage",
];
/** Whose budget a call is about: exactly one of these (`plan` only with `ip`, for a plan's own `ip`). */
const SUBJECT = ["key", "ip", "anonymous", "plan"];
/** The fields each action's body may carry besides its subject. */
const FIELDS: Record<Action, readonly string[]> = {
  status: SUBJECT,
  reset: SUBJECT,
  block: [...SUBJECT, "until", "for"],
  unblock: SUBJECT,
  override: [...SUBJECT, "limits", "expires", "for"],
  "override/delete": SUBJECT,
  credits: ["key", "add", "id"],
  usage: ["key", "period", "from", "to"],
};

/** Answers one admin request; never throws, never proxies. */
export async function handleAdmin(
  request: Request,
  path: string,
  env: AdminEnv,
  config: Config,
  ctx: AdminContext,
): Promise<Response> {
  const sub = path.slice(config.admin.path.length);
  try {
    if (!path.startsWith(config.admin.path)) {
      logEvent("admin_token_elsewhere", { path: path.slice(0, 64) }, "warn");
      throw new HttpError(
        404,
        "Not Found",
        `This request carries the admin token, so it is never proxied; the admin API lives under ${config.admin.path}.`,
      );
    }
    if (sub === "") {
      if (request.method !== "GET" && request.method !== "HEAD") throw notAllowed("GET, HEAD");
      return page(config);
    }
    if (!(await authorized(request, env.ADMIN_TOKEN ?? ""))) {
      logEvent(
        "admin_unauthorized",
        { path: sub.slice(0, 64), token: request.headers.has("authorization") ? "wrong" : "missing" },
        "warn",
      );
      throw new HttpError(401, "Unauthorized", "The admin API needs Authorization: Bearer <ADMIN_TOKEN>.", {
        headers: { "WWW-Authenticate": 'Bearer realm="limiter-admin"' },
      });
    }
    const action = ACTIONS.find((a) => a === sub);
    if (!action) {
      throw new HttpError(
        404,
        "Not Found",
        `No admin endpoint ${JSON.stringify(sub)}; expected one of ${ACTIONS.join(", ")}.`,
      );
    }
    if (request.method !== "POST") throw notAllowed("POST");
    const body = await readBody(request);
    unknownFields(body, FIELDS[action]);
    if (action === "usage") return await usageOf(request, body, env, config);
    return await run(action, body, env, config, ctx);
  } catch (e) {
    if (e instanceof HttpError) return e.toResponse();
    logEvent(
      "admin_error",
      { action: sub.slice(0, 64), message: e instanceof Error ? e.message.split("\n")[0] : "unknown" },
      "error",
    );
    return problem(
      503,
      "Service Unavailable",
      "The key's limiter did not answer; retry shortly.",
      {},
      { "Retry-After": "1" },
    );
  }
}

async function run(
  action: Action,
  body: Record<string, unknown>,
  env: AdminEnv,
  config: Config,
  ctx: AdminContext,
): Promise<Response> {
  const { name, plan } = subjectOf(body, config);
  const id = await keyId(name);
  const limits = plan.limits;
  if (limits === null) {
    if (action !== "status") {
      throw new HttpError(
        409,
        "Conflict",
        `The key's plan ${JSON.stringify(plan.name)} is unlimited: its requests never consult the limiter, so it cannot be ${action === "block" || action === "unblock" ? "blocked" : action === "reset" ? "reset" : action === "credits" ? "given credits" : "overridden"}. Give the key a limited plan first.`,
      );
    }
    return json({
      key_id: id,
      plan: plan.name,
      unlimited: true,
      stored: false,
      limits: [],
      block: null,
      override: null,
      history: null,
    });
  }
  const stub = () => objectsOf(env, config).getByName(name);
  const call = <T>(p: Promise<T>) => withDeadline(p, config.objectTimeoutMs);
  const fields: Record<string, unknown> = {};
  switch (action) {
    case "status":
      break;
    case "reset":
      await call(stub().reset(limits, HISTORY_BUCKETS, plan.routes.map(routeBudget)));
      break;
    case "block": {
      const until = when(body, "until", "block until", ctx.now());
      if (until === null)
        throw bad('"until" (an ISO time or ms since the epoch) or "for" (a duration like "1h"): required');
      await call(stub().block(until));
      fields.until = iso(until);
      break;
    }
    case "unblock":
      await call(stub().unblock());
      break;
    case "override": {
      let parsed: Limit[];
      try {
        parsed = parseLimits(body.limits, "limits");
      } catch (e) {
        if (e instanceof ConfigError) throw bad(e.message);
        throw e;
      }
      const expires = when(body, "expires", "expire", ctx.now());
      await call(stub().override(parsed, expires));
      fields.limits = parsed.map(limitJson);
      fields.expires = expires === null ? null : iso(expires);
      break;
    }
    case "override/delete":
      await call(stub().clearOverride());
      break;
    case "credits":
      fields.balance = await call(topUp(body, plan, stub()));
      fields.added = body.add;
      break;
  }
  if (action !== "status") {
    ctx.forget(name);
    logEvent("admin", { action, key_id: id, plan: plan.name, ...fields });
  }
  const status = (await call(
    stub().status(limits, HISTORY_BUCKETS, plan.routes.map(routeBudget), plan.meters ?? {}),
  )) as KeyStatus;
  return json(statusJson(id, plan, limits, status));
}

/** The status of a key as the API returns it (docs/operating.md). */
export function statusJson(
  id: string,
  plan: Plan,
  planLimits: readonly Limit[],
  s: KeyStatus,
): Record<string, unknown> {
  const applied = s.override?.limits ?? planLimits;
  const longest = applied[s.history.limit];
  const { meters } = plan;
  return {
    key_id: id,
    plan: plan.name,
    unlimited: false,
    stored: s.stored,
    now: iso(s.now),
    now_ms: s.now,
    limits: applied.map((l, i) => limitState(l, s.decision.limits[i], s.override ? "override" : "plan")),
    block:
      s.blockedUntil === null
        ? null
        : {
            until: iso(s.blockedUntil),
            until_ms: s.blockedUntil,
            remaining_ms: s.blockedUntil - s.now,
            // What set it: an operator, or a penalty for repeated refusals (an object of 0.2 says neither).
            cause: s.blockCause ?? "operator",
          },
    // Refusals counted towards the plan's penalty, still within its span.
    refusals: s.refusals ?? 0,
    // Requests holding a concurrency slot now (an object of 0.2 holds none).
    in_flight: s.inFlight ?? 0,
    override: s.override === null ? null : overrideJson(s.override),
    quotas: quotasJson(plan, s),
    credits: meters?.credits ? { balance: s.decision.credits?.balance ?? meters.credits.initial } : null,
    usage: meters?.usage ? { time_zone: meters.usage.zone, keep_days: meters.usage.keepDays } : null,
    routes: plan.routes.map((r) => {
      const d = s.routes?.find((x) => x.name === r.name)?.decision;
      return {
        name: r.name,
        method: r.method,
        path: r.pathPrefix,
        limits: r.limits.map((l, i) => limitState(l, d?.limits[i], "route")),
      };
    }),
    history: {
      limit: longest?.name ?? null,
      window_ms: longest?.windowMs ?? 0,
      start_ms: s.history.startMs,
      bucket_ms: s.history.bucketMs,
      counts: s.history.counts,
      ahead: s.history.ahead,
    },
  };
}

/**
 * `POST <admin>/usage {"key", "period", "from"?, "to"?}` (docs/operating.md, "Usage"): the key's usage per day or
 * month, as JSON (`{ key_id, plan, period, time_zone, periods: [{ start, end, requests, cost }] }`) or, with `Accept:
 * text/csv`, as CSV. `409` for a plan that keeps no usage.
 */
async function usageOf(
  request: Request,
  body: Record<string, unknown>,
  env: AdminEnv,
  config: Config,
): Promise<Response> {
  const { name, plan } = subjectOf(body, config);
  const spec = plan.meters?.usage;
  if (!spec) {
    throw new HttpError(
      409,
      "Conflict",
      `The key's plan ${JSON.stringify(plan.name)} keeps no usage (docs/configuration.md, "Usage"); set usage = true on it first.`,
    );
  }
  const period = body.period;
  if (period !== "day" && period !== "month") {
    throw bad(`"period": expected "day" or "month", got ${JSON.stringify(period) ?? "nothing"}`);
  }
  const from = instant(body.from, "from", 0);
  const to = instant(body.to, "to", MAX_TIME_MS);
  if (from > to) throw bad(`"from" is after "to"`);
  const periods = await withDeadline(
    objectsOf(env, config).getByName(name).usage(spec, { period, from, to }),
    config.objectTimeoutMs,
  );
  if ((request.headers.get("accept") ?? "").includes("text/csv")) {
    return new Response(usageCsv(periods), {
      headers: { "content-type": "text/csv; charset=utf-8", "cache-control": "no-store" },
    });
  }
  return json({
    key_id: await keyId(name),
    plan: plan.name,
    period,
    time_zone: spec.zone,
    periods: periods.map((p) => ({
      start: iso(p.start),
      end: iso(p.end),
      start_ms: p.start,
      end_ms: p.end,
      requests: p.requests,
      cost: p.cost,
    })),
  });
}

/** A time in a body: ms since the epoch, or an ISO 8601 string; `fallback` when missing; else `400`. */
function instant(value: unknown, field: string, fallback: number): number {
  if (value === undefined) return fallback;
  const t = typeof value === "number" ? value : typeof value === "string" ? Date.parse(value) : Number.NaN;
  if (!Number.isSafeInteger(t) || t < 0 || t > MAX_TIME_MS) {
    throw bad(`"${field}": expected an ISO time or ms since the epoch, got ${JSON.stringify(value)}`);
  }
  return t;
}

/** A top-up (`{"key", "add", "id"?}`) at the key's object: its new balance. */
function topUp(body: Record<string, unknown>, plan: Plan, stub: LimiterStub): Promise<number> {
  const spec = creditsOf(plan);
  const add = added(body.add);
  const id = body.id;
  if (id === undefined) return stub.credit(spec, add);
  if (typeof id !== "string" || id.length === 0 || id.length > 128)
    throw bad(`"id": expected the top-up's id, a string of 1 to 128 characters, got ${JSON.stringify(id)}`);
  return stub.credit(spec, add, id);
}

/** The credits of a key's plan, for a top-up: `409` when it has none. */
function creditsOf(plan: Plan): CreditSpec {
  const credits = plan.meters?.credits;
  if (!credits) {
    throw new HttpError(
      409,
      "Conflict",
      `The key's plan ${JSON.stringify(plan.name)} has no credits (docs/configuration.md, "Quotas and credits"); give it credits = { initial = … } first.`,
    );
  }
  return credits;
}

/** The credits a top-up adds: a positive whole number, else `400`. */
function added(value: unknown): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
    throw bad(`"add": expected a positive whole number of credits, got ${JSON.stringify(value) ?? "nothing"}`);
  }
  return value;
}

/** A key's calendar quotas in its status: each one's settings, and what is used and left of it in this period. */
function quotasJson(plan: Plan, s: KeyStatus): Record<string, unknown>[] {
  return (plan.meters?.quotas ?? []).map((q, i) => {
    const st = s.decision.quotas?.[i];
    const remaining = st?.remaining ?? q.limit;
    const resetsAt = st && st.resetMs > 0 ? s.now + st.resetMs : null;
    return {
      name: q.name,
      limit: q.limit,
      period: q.period,
      time_zone: q.zone,
      used: q.limit - remaining,
      remaining,
      resets_at: resetsAt === null ? null : iso(resetsAt),
      resets_at_ms: resetsAt,
    };
  });
}

/** One limit of a key's status: its settings, and what is used and left of it now. */
function limitState(l: Limit | NamedLimit, st: LimitStatus | undefined, source: string): Record<string, unknown> {
  const remaining = st?.remaining ?? l.limit;
  return {
    ...limitJson(l),
    used: Math.max(0, l.limit - remaining),
    remaining,
    reset_ms: st?.resetMs ?? 0,
    source,
  };
}

function overrideJson(o: Override): Record<string, unknown> {
  return {
    limits: o.limits.map(limitJson),
    expires: o.expiresAt === null ? null : iso(o.expiresAt),
    expires_ms: o.expiresAt,
  };
}

function limitJson(l: { name: string; limit: number; windowMs: number; tickMs: number }): Record<string, unknown> {
  return { name: l.name, limit: l.limit, window_ms: l.windowMs, tick_ms: l.tickMs };
}

/**
 * The budget a call is about, named as requests name it: a key's (`{"key"}`), a client address's `ip`
 * budget (`{"ip"}`, with `"plan"` for a plan's own), or its `anonymous` budget (`{"anonymous"}`).
 */
function subjectOf(body: Record<string, unknown>, config: Config): Identity {
  const given = (["key", "ip", "anonymous"] as const).filter((f) => body[f] !== undefined);
  if (given.length !== 1) {
    throw bad(
      given.length === 0
        ? 'key: required, e.g. {"key": "live_abc"} (or {"ip": "192.0.2.1"}, {"anonymous": "192.0.2.1"})'
        : `${given.join(", ")}: give one of key, ip and anonymous`,
    );
  }
  if (body.plan !== undefined && given[0] !== "ip") throw bad("plan: only with ip (a plan's own ip budget)");
  if (given[0] === "key") return identified(body.key, config);
  const field = given[0] as "ip" | "anonymous";
  const value = body[field];
  const client = typeof value === "string" ? clientOf(value, config.ipv6Subnet) : null;
  if (client === null) throw bad(`${field}: expected an IPv4 or IPv6 address, got ${describe(value)}`);
  if (field === "anonymous") {
    if (!config.anonymous)
      throw unprocessable("anonymous: RATE_LIMIT.anonymous is not set; no address has such a budget.");
    return { name: objectName("ip", client), plan: config.anonymous };
  }
  const budget = addressBudget(body.plan, config);
  return { name: objectName(budget.kind, client), plan: budget.plan };
}

/** The `ip` budget of the plan named `plan` (its own, or the top-level one), or the top-level one without a plan. */
function addressBudget(plan: unknown, config: Config): AddressBudget {
  if (plan === undefined) {
    if (!config.ip) throw unprocessable("ip: RATE_LIMIT.ip is not set; no address has such a budget.");
    return config.ip;
  }
  const found = config.plans.find((p) => p.name === plan) ?? (plan === "default" ? config.defaultPlan : null);
  if (!found) throw bad(`plan: no plan named ${describe(plan)}`);
  if (!found.ip) throw unprocessable(`plan: plan ${JSON.stringify(found.name)} has no ip budget.`);
  return found.ip;
}

function unprocessable(detail: string): HttpError {
  return new HttpError(422, "Unprocessable Content", detail);
}

/**
 * The body's key, checked as the Worker checks keys (with messages for operators), and its
 * object's name and plan, found as a request's are.
 */
function identified(value: unknown, config: Config): Identity {
  if (value === undefined) throw bad('key: required, e.g. {"key": "live_abc"}');
  if (typeof value !== "string" || value === "") throw bad(`key: expected a non-empty string, got ${describe(value)}`);
  try {
    checkKey(value, "the body", config.key.maxLength);
    return identify(config, value, null);
  } catch (e) {
    if (!(e instanceof LimiterError)) throw e;
    // A malformed key (400), or one the Worker refuses with 401 (no plan, not key.pattern): no request can use it.
    if (e.code === "malformed_key") throw bad(`key: ${e.message}`);
    throw unprocessable(`key: ${e.message} Its requests get 401 and it has no state.`);
  }
}

/**
 * `body[field]` (an ISO time or ms since the epoch) or `body.for` (a duration from now) as ms;
 * null when neither is given. It must lie in the future.
 */
function when(body: Record<string, unknown>, field: string, verb: string, now: number): number | null {
  const at = body[field];
  const span = body.for;
  if (at !== undefined && span !== undefined) throw bad(`give "${field}" or "for", not both`);
  let ms: number;
  if (span !== undefined) {
    try {
      ms = now + parseDuration(span, "for");
    } catch (e) {
      throw bad((e as Error).message);
    }
  } else if (at === undefined) {
    return null;
  } else if (typeof at === "number") {
    if (!Number.isSafeInteger(at)) throw bad(`${field}: expected whole ms since the epoch, got ${describe(at)}`);
    ms = at;
  } else if (typeof at === "string" && /^\d{4}-\d\d-\d\dT/.test(at) && !Number.isNaN(Date.parse(at))) {
    ms = Date.parse(at);
  } else {
    throw bad(`${field}: expected an ISO time like "2030-01-01T00:00:00Z" or ms since the epoch, got ${describe(at)}`);
  }
  if (!(ms <= MAX_TIME_MS)) {
    throw bad(`${field}: at most ${iso(MAX_TIME_MS)} (${MAX_TIME_MS} ms), got ${describe(at ?? span)}`);
  }
  if (ms <= now) throw bad(`${field}: ${iso(ms)} is not in the future; nothing to ${verb}`);
  return ms;
}

/** An ISO time for a time in ms; null beyond what `Date` holds (a time stored by an earlier version). */
function iso(ms: number): string | null {
  return Math.abs(ms) <= 8.64e15 ? new Date(ms).toISOString() : null;
}

/** The JSON object in the body, read up to {@link MAX_BODY_BYTES}. */
async function readBody(request: Request): Promise<Record<string, unknown>> {
  const declared = Number(request.headers.get("content-length") ?? "0");
  if (declared > MAX_BODY_BYTES) throw tooLarge();
  const chunks: Uint8Array[] = [];
  let size = 0;
  if (request.body) {
    const reader = request.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > MAX_BODY_BYTES) {
        await reader.cancel();
        throw tooLarge();
      }
      chunks.push(value);
    }
  }
  if (size === 0) throw bad('body: expected a JSON object such as {"key": "live_abc"}, got nothing');
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    bytes.set(c, at);
    at += c.byteLength;
  }
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes));
  } catch (e) {
    throw bad(`body: not valid JSON (${(e as Error).message.split("\n")[0]})`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw bad(`body: expected a JSON object, got ${describe(value)}`);
  }
  return value as Record<string, unknown>;
}

function unknownFields(body: Record<string, unknown>, known: readonly string[]): void {
  for (const k of Object.keys(body)) {
    if (!known.includes(k)) throw bad(`${k}: unknown field; expected ${known.join(", ")}`);
  }
}

/**
 * Whether the request carries the token, compared in constant time: both sides are hashed to 32
 * bytes first, so neither the length nor the first differing byte changes the work done.
 */
async function authorized(request: Request, token: string): Promise<boolean> {
  const header = request.headers.get("authorization") ?? "";
  const m = BEARER.exec(header);
  const given = m ? (m[1] ?? "").trim() : "";
  const [a, b] = await Promise.all([sha256(given), sha256(token)]);
  let diff = m && token !== "" ? 0 : 1;
  for (let i = 0; i < a.length; i++) diff |= (a[i] as number) ^ (b[i] as number);
  return diff === 0;
}

async function sha256(s: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(s)));
}

function page(config: Config): Response {
  return new Response(adminPage(config.admin.path), {
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

function json(body: unknown): Response {
  return new Response(JSON.stringify(body), {
    headers: { "content-type": "application/json", "cache-control": "no-store" },
  });
}

function bad(detail: string): HttpError {
  return new HttpError(400, "Bad Request", detail);
}

function tooLarge(): HttpError {
  return new HttpError(413, "Content Too Large", `The admin API reads bodies of at most ${MAX_BODY_BYTES} bytes.`);
}

function notAllowed(allow: string): HttpError {
  return new HttpError(405, "Method Not Allowed", `Use ${allow}.`, { headers: { Allow: allow } });
}
