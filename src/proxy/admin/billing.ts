/**
 * @module The admin API's credits and usage (docs/operating.md, "Credits", "Usage"): a top-up at a key's object, and
 * its usage per day or month as JSON or CSV.
 */

import { keyId } from "../../base/log.ts";
import { withDeadline } from "../../client/policy.ts";
import type { Config, Plan } from "../../config/types.ts";
import { type CreditSpec, MAX_CREDITS } from "../../core/credits.ts";
import { usageCsv } from "../../core/usage.ts";
import { MAX_TIME_MS } from "../../object/index.ts";
import { HttpError } from "../../pipeline/http.ts";
import type { LimiterStub, TopUp } from "../../protocol.ts";
import { type ObjectsEnv, objectsOf } from "../objects.ts";
import { bad, instant, subjectOf } from "./body.ts";
import { iso, json } from "./status.ts";

/**
 * `POST <admin>/usage {"key", "period", "from"?, "to"?}` (docs/operating.md, "Usage"): the key's usage per day or
 * month, as JSON (`{ key_id, plan, period, time_zone, periods: [{ start, end, requests, cost }] }`) or, with `Accept:
 * text/csv`, as CSV. `409` for a plan that keeps no usage.
 */
export async function usageOf(
  request: Request,
  body: Record<string, unknown>,
  env: ObjectsEnv,
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
  if (wantsCsv(request.headers.get("accept"))) {
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

/**
 * Whether an `Accept` header asks for CSV: one of its media ranges is `text/csv` — compared without regard to case,
 * parameters (`; charset=utf-8`, `; q=0.9`) allowed, but not `q=0`, which refuses it. `text/csvx` is another type.
 */
export function wantsCsv(accept: string | null): boolean {
  if (accept === null) return false;
  return accept.split(",").some((range) => {
    const [type = "", ...params] = range.split(";").map((p) => p.trim().toLowerCase());
    if (type !== "text/csv") return false;
    const q = params.find((p) => /^q\s*=/.test(p));
    return q === undefined || Number(q.slice(q.indexOf("=") + 1).trim()) > 0;
  });
}

/**
 * A top-up (`{"key", "add", "id"?}`) at the key's object: its new balance, and whether it added the credits (false: a
 * top-up with its id was applied before). `400` for one that would take the balance past {@link MAX_CREDITS}: the
 * object refuses it, and nothing changes.
 */
export async function topUp(body: Record<string, unknown>, plan: Plan, stub: LimiterStub): Promise<TopUp> {
  const spec = creditsOf(plan);
  const add = added(body.add);
  const id = body.id;
  if (id !== undefined && (typeof id !== "string" || id.length === 0 || id.length > 128))
    throw bad(`"id": expected the top-up's id, a string of 1 to 128 characters, got ${JSON.stringify(id)}`);
  try {
    return await (id === undefined ? stub.topUp(spec, add) : stub.topUp(spec, add, id));
  } catch (e) {
    // The one refusal only the object can make, knowing the balance (src/core/credits.ts, `add`): RPC keeps a
    // RangeError's type and message.
    if (e instanceof RangeError && e.message.startsWith("add: ")) {
      throw bad(`"add": ${e.message.slice("add: ".length)}; nothing was added`);
    }
    throw e;
  }
}

/**
 * What the `admin` log line says of a top-up: what happened, not what was asked — the credits `added` (0 for one whose
 * id was applied before, which is a `repeat`) and the `balance` after it.
 */
export function topUpLog(done: TopUp, add: unknown): Record<string, unknown> {
  return done.applied ? { added: add, balance: done.balance } : { added: 0, repeat: true, balance: done.balance };
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

/** The credits a top-up adds: a positive whole number up to {@link MAX_CREDITS}, else `400`. */
function added(value: unknown): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
    // JSON.parse reads a number too large for a double (`1e400`) as Infinity, which JSON.stringify spells `null`.
    const got =
      typeof value === "number" && !Number.isFinite(value)
        ? "a number too large to hold"
        : (JSON.stringify(value) ?? "nothing");
    throw bad(`"add": expected a positive whole number of credits up to ${MAX_CREDITS}, got ${got}`);
  }
  return value;
}
