/**
 * @module RateLimit header fields in the forms clients parse: draft-ietf-httpapi-ratelimit-headers-11
 * (the default; draft-8 has the same syntax), the combined draft-7 field, draft-6's separate
 * fields, the legacy `X-RateLimit-*` fields, or none. `Retry-After` is the caller's.
 */

import type { HeaderForm } from "../config/types.ts";

/** A limit as the headers show it. */
export interface HeaderLimit {
  readonly name: string;
  readonly limit: number;
  readonly windowMs: number;
  /** A calendar quota's period: its policy has no window (`w`), its reset is the next period's start. */
  readonly period?: string;
}

/** One limit's state; null where it is not known (then that limit is left out of the `RateLimit` field). */
export interface HeaderState {
  readonly remaining: number;
  readonly resetMs: number;
}

/** What the rate-limit fields show: the limits, each one's state (null: not known), and when it was decided (ms). */
export interface HeaderView {
  readonly limits: readonly HeaderLimit[];
  readonly states: readonly (HeaderState | null)[];
  readonly at: number;
}

/** Whole seconds, rounded up (Retry-After, `t`, `reset`). */
export function seconds(ms: number): number {
  return Math.max(0, Math.ceil(ms / 1000));
}

/** Serialises a structured-field string (RFC 9651 §4.1.6). */
export function sfString(s: string): string {
  return s.includes("\\") || s.includes('"') ? `"${s.replace(/[\\"]/g, (c) => `\\${c}`)}"` : `"${s}"`;
}

/** Where header fields are set: a `Headers`, or a response's own headers. */
export interface HeaderSink {
  set(name: string, value: string): void;
}

/**
 * `RateLimit-Policy` for these limits: `"per-second";q=100;w=1, "per-minute";q=1000;w=60` in the
 * draft-8/11 form, `100;w=1, 1000;w=60` in the draft-6/7 form; "" for the other forms. A calendar quota has no window
 * (`"monthly";q=10000`): `w` is optional, and a month is no fixed number of seconds.
 */
export function policyHeader(limits: readonly HeaderLimit[], form: HeaderForm = "draft-11"): string {
  const named = form === "draft-11" || form === "draft-8";
  if (!named && form !== "draft-7" && form !== "draft-6") return "";
  let out = "";
  for (const l of limits)
    out += `${out ? ", " : ""}${named ? `${sfString(l.name)};q=` : ""}${l.limit}${l.period === undefined ? `;w=${seconds(l.windowMs)}` : ""}`;
  return out;
}

/** The draft-8/11 `RateLimit` field: `"per-second";r=42;t=1, …` — `t` left out while nothing is in a window. */
export function rateLimitField(limits: readonly HeaderLimit[], states: readonly (HeaderState | null)[]): string {
  let out = "";
  for (let i = 0; i < limits.length; i++) {
    const s = states[i];
    if (!s) continue;
    const name = sfString((limits[i] as HeaderLimit).name);
    out += `${out ? ", " : ""}${name};r=${s.remaining}${s.resetMs > 0 ? `;t=${seconds(s.resetMs)}` : ""}`;
  }
  return out;
}

/**
 * The limit the single-valued forms report: the known state with the fewest units remaining (on
 * a tie, the later reset), or -1 when no state is known.
 */
export function closest(states: readonly (HeaderState | null)[]): number {
  let best = -1;
  for (let i = 0; i < states.length; i++) {
    const s = states[i];
    if (!s) continue;
    const b = best === -1 ? null : (states[best] as HeaderState);
    if (!b || s.remaining < b.remaining || (s.remaining === b.remaining && s.resetMs > b.resetMs)) best = i;
  }
  return best;
}

/**
 * Sets the rate-limit fields of `form` on `headers`. `view.at` (ms since the epoch) is used only by
 * the legacy form, whose reset is a Unix time in seconds.
 */
export function setRateLimitHeaders(headers: HeaderSink, form: HeaderForm, view: HeaderView): void {
  const { limits, states, at: now } = view;
  if (form === "none" || limits.length === 0) return;
  if (form === "draft-11" || form === "draft-8") {
    headers.set("RateLimit-Policy", policyHeader(limits, form));
    const value = rateLimitField(limits, states);
    if (value) headers.set("RateLimit", value);
    return;
  }
  if (form !== "legacy") headers.set("RateLimit-Policy", policyHeader(limits, form));
  const i = closest(states);
  if (i === -1) return;
  const l = limits[i] as HeaderLimit;
  const s = states[i] as HeaderState;
  if (form === "draft-7") {
    headers.set("RateLimit", `limit=${l.limit}, remaining=${s.remaining}, reset=${seconds(s.resetMs)}`);
  } else if (form === "draft-6") {
    headers.set("RateLimit-Limit", String(l.limit));
    headers.set("RateLimit-Remaining", String(s.remaining));
    headers.set("RateLimit-Reset", String(seconds(s.resetMs)));
  } else {
    headers.set("X-RateLimit-Limit", String(l.limit));
    headers.set("X-RateLimit-Remaining", String(s.remaining));
    headers.set("X-RateLimit-Reset", String(seconds(now + s.resetMs)));
  }
}
