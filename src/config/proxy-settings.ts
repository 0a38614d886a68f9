/**
 * @module Parses the settings only the proxy reads: `ORIGIN`, and in `RATE_LIMIT` the operators' `admin` path, the
 * statuses that `refund`, and `cors`.
 */

import { describe } from "../core/duration.ts";
import { array, fromJsonString, nonEmptyString, object, unknownFields, wholeNumber } from "./fields.ts";
import { parseLimits } from "./limits.ts";
import { limitsPlan } from "./plans.ts";
import { type AdminSettings, ConfigError, type CorsSettings, DEFAULTS, type LeaseSettings } from "./types.ts";

/**
 * `ORIGIN` (or an origin's `url`, named by `field`): the absolute http(s) URL allowed requests go to, without
 * credentials, query or fragment.
 */
export function parseOrigin(value: unknown, field = "ORIGIN"): URL {
  if (value === undefined || value === "") {
    throw new ConfigError(
      field === "ORIGIN"
        ? 'ORIGIN: required, the base URL of your API, e.g. "https://api.example.com" (or RATE_LIMIT.origins, several by path)'
        : `${field}: required, the origin's base URL, e.g. "https://api.example.com"`,
    );
  }
  let s: unknown = value;
  if (typeof s === "string" && s.trim().startsWith('"')) s = fromJsonString(s, field);
  if (typeof s !== "string") throw new ConfigError(`${field}: expected a URL string, got ${describe(s)}`);
  let url: URL;
  try {
    url = new URL(s);
  } catch {
    throw new ConfigError(`${field}: expected an absolute http(s) URL, got ${JSON.stringify(s)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new ConfigError(`${field}: expected an http or https URL, got ${JSON.stringify(s)}`);
  }
  if (url.username || url.password) {
    // The message reaches clients (500 detail) and logs: never echo the credentials.
    const redacted = `${url.protocol}//***@${url.host}${url.pathname}`;
    throw new ConfigError(
      `${field}: must not carry a user name or password (fetch refuses such URLs), got ${JSON.stringify(redacted)}`,
    );
  }
  if (url.search || url.hash) {
    throw new ConfigError(
      `${field}: must not carry a query or fragment (the request's own are appended), got ${JSON.stringify(s)}`,
    );
  }
  return url;
}

/** `admin.path`: where the operators' API and page live; a prefix no API path of yours uses. */
export function parseAdmin(value: unknown, root: string): AdminSettings {
  if (value === undefined) return { path: DEFAULTS.adminPath };
  const a = object(value, `${root}.admin`);
  unknownFields(a, ["path"], `${root}.admin`);
  if (a.path === undefined) return { path: DEFAULTS.adminPath };
  const path = nonEmptyString(a.path, `${root}.admin.path`);
  if (!/^\/(?:[A-Za-z0-9._~-]+\/)+$/.test(path)) {
    throw new ConfigError(
      `${root}.admin.path: expected a path prefix like "/__limiter/" (segments of letters, digits, ".", "_", "~" or "-", starting and ending with "/", not "/" alone), got ${JSON.stringify(path)}`,
    );
  }
  return { path };
}

/** `refund = { status = [500, 502, 503, 504] }`: responses with these statuses give their units back. */
export function parseRefund(value: unknown, root: string): ReadonlySet<number> {
  if (value === undefined) return new Set();
  const r = object(value, `${root}.refund`);
  unknownFields(r, ["status"], `${root}.refund`);
  const list = array(r.status, `${root}.refund.status`);
  const status = { min: 200, max: 599, expected: "an HTTP status from 200 to 599" };
  return new Set(list.map((s, i) => wholeNumber(s, `${root}.refund.status[${i}]`, status)));
}

/** `cors = { origins = [...] | "*", preflight_limits = [...] }` (proxy only). */
export function parseCors(value: unknown, root: string, leases: LeaseSettings): CorsSettings {
  const field = `${root}.cors`;
  const c = value === undefined ? {} : object(value, field);
  unknownFields(c, ["origins", "preflight_limits"], field);
  let origins: CorsSettings["origins"] = new Set();
  if (c.origins === "*") origins = "*";
  else if (c.origins !== undefined) {
    origins = new Set(array(c.origins, `${field}.origins`).map((o, i) => corsOrigin(o, `${field}.origins[${i}]`)));
  }
  const preflightLimits = parseLimits(c.preflight_limits ?? DEFAULTS.preflightLimits, `${field}.preflight_limits`, {
    defaultName: (w) => `preflight-${w}`,
  });
  return { origins, preflight: { kind: "preflight", plan: limitsPlan("preflight", preflightLimits, leases, field) } };
}

/** One of `cors.origins`: an origin exactly as browsers send it. */
function corsOrigin(value: unknown, field: string): string {
  const text = nonEmptyString(value, field);
  let origin: string | null = null;
  try {
    origin = new URL(text).origin;
  } catch {}
  if (origin !== text || !/^https?:/.test(text)) {
    throw new ConfigError(
      `${field}: expected an origin as browsers send it, scheme://host[:port] without a path (e.g. "https://app.example.com"), or origins = "*"; got ${JSON.stringify(text)}`,
    );
  }
  return text;
}
