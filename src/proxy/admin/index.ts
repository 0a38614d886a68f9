/**
 * @module The operators' API under `RATE_LIMIT.admin.path` (default `/__limiter/`), present only while the secret
 * `ADMIN_TOKEN` is set (docs/operating.md): which requests it answers, and each call's flow. Every call but the page
 * needs `Authorization: Bearer <ADMIN_TOKEN>`; the key travels in the JSON body (body.ts), never in the URL. Admin
 * requests are never proxied and never counted. The answers' shapes are in status.ts, credits and usage in billing.ts.
 */

import { keyId, logEvent } from "../../base/log.ts";
import { withDeadline } from "../../client/policy.ts";
import { routeBudget } from "../../config/lookup.ts";
import { parseLimits } from "../../config/parse.ts";
import { type Config, ConfigError, type Limit } from "../../config/types.ts";
import type { KeyStatus, RateLimiter } from "../../object/index.ts";
import { HttpError, problem } from "../../pipeline/http.ts";
import { objectsOf } from "../objects.ts";
import { topUp, topUpLog, usageOf } from "./billing.ts";
import { bad, notAllowed, readBody, SUBJECTS, subjectOf, unknownFields, when } from "./body.ts";
import { KEY_FIELDS, mint } from "./keys.ts";
import { page } from "./page.ts";
import { iso, json, limitJson, statusJson } from "./status.ts";
import { authorized, tokenCarrier } from "./token.ts";

/** The bindings the admin API reads. */
export interface AdminEnv {
  /** The operators' bearer token (a secret); unset: no admin API, the paths are ordinary traffic. */
  readonly ADMIN_TOKEN?: string;
  readonly LIMITER: DurableObjectNamespace<RateLimiter>;
  /** The secret keys are minted with (`keys`; docs/configuration.md, "Signed keys"). */
  readonly KEY_SECRET?: string;
}

/** What the Worker lends the admin API. */
export interface AdminContext {
  /** Drops what this isolate holds for the key (leases, a cached denial) after an operator's change. */
  forget(name: string): void;
  /** The clock (ms) that times given with `for` start from, and that `until`/`expires` must lie after. */
  now(): number;
}

/** Buckets in `history` (the longest window's grants over time). */
export const HISTORY_BUCKETS = 60;

/**
 * Whether the admin API answers `request`: only while `ADMIN_TOKEN` is set, for a path under `admin.path`, or for any
 * request that carries the admin token anywhere ({@link tokenCarrier}: a header, a query parameter) — it is never
 * proxied, whatever its path, so the token never reaches the origin. `path` is the request's normalised path
 * (src/base/path.ts).
 */
export function isAdminRequest(request: Request, path: string, env: AdminEnv, config: Config): boolean {
  if (!env.ADMIN_TOKEN) return false;
  return path.startsWith(config.admin.path) || tokenCarrier(request, env.ADMIN_TOKEN) !== null;
}

type Action = "status" | "reset" | "block" | "unblock" | "override" | "override/delete" | "credits" | "usage" | "keys";
const ACTIONS: readonly Action[] = [
  "status",
  "reset",
  "block",
  "unblock",
  "override",
  "override/delete",
  "credits",
  "usage",
  "keys",
];
/** Whose budget a call is about: exactly one of {@link SUBJECTS} (`plan` only with `ip` or `account`). */
const SUBJECT = [...SUBJECTS, "plan"];
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
  keys: KEY_FIELDS,
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
      // The token is recognised, so not 401 (which asks for credentials); it is simply not for this path.
      const carrier = tokenCarrier(request, env.ADMIN_TOKEN ?? "") ?? "unknown";
      logEvent("admin_token_elsewhere", { path: path.slice(0, 64), in: carrier.slice(0, 64) }, "warn");
      throw new HttpError(
        403,
        "Forbidden",
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
    if (action === "keys") return await mint(body, env, config, ctx.now());
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
      Object.assign(fields, topUpLog(await call(topUp(body, plan, stub())), body.add));
      break;
  }
  if (action !== "status") {
    ctx.forget(name);
    logEvent("admin", { action, key_id: id, plan: plan.name, ...fields });
  }
  const status = (await call(
    stub().status(limits, HISTORY_BUCKETS, plan.routes.map(routeBudget), plan.meters ?? {}),
  )) as KeyStatus;
  const whatTopUpDid = action === "credits" ? { added: fields.added, applied: fields.repeat !== true } : {};
  return json({ ...statusJson(id, plan, limits, status), ...whatTopUpDid });
}
