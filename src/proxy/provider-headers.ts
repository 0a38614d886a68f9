/**
 * @module The model providers' own rate-limit fields, replaced by the key's (docs/llm.md, "The provider's rate-limit
 * headers"). OpenAI's `x-ratelimit-*` and Anthropic's `anthropic-ratelimit-*` describe the operator's account with the
 * provider — millions of tokens — and clients (the official SDKs, agents) pace on them; for a request a `costs` rule
 * settles as `"openai"` or `"anthropic"`, the proxy removes them and sets the tightest of the key's own limits in the
 * provider's format: its limit, what remains of it, and when it is next full.
 */

import type { LimitResult, RateLimitResult } from "../client/result.ts";
import type { Settle } from "../config/types.ts";

/** The providers whose fields are replaced: the named forms of a rule's `settle`. */
export type Provider = Exclude<Settle["from"], "header" | "json">;

const PREFIX: Record<Provider, string> = { openai: "x-ratelimit-", anthropic: "anthropic-ratelimit-" };

/** Removes `provider`'s rate-limit fields from `headers` and sets the key's own from `result`. */
export function setProviderHeaders(headers: Headers, provider: Provider, result: RateLimitResult): void {
  const prefix = PREFIX[provider];
  // Collected first: deleting while iterating a Headers skips entries.
  const theirs = [...headers.keys()].filter((name) => name.startsWith(prefix));
  for (const name of theirs) headers.delete(name);
  const tightest = tightestOf(result.limits);
  if (tightest === null) return;
  const { limit, remaining, resetMs } = tightest;
  if (provider === "openai") {
    headers.set("x-ratelimit-limit-tokens", String(limit));
    if (remaining !== null) headers.set("x-ratelimit-remaining-tokens", String(remaining));
    if (resetMs !== null) headers.set("x-ratelimit-reset-tokens", openaiDuration(resetMs));
  } else {
    headers.set("anthropic-ratelimit-tokens-limit", String(limit));
    if (remaining !== null) headers.set("anthropic-ratelimit-tokens-remaining", String(remaining));
    if (resetMs !== null) headers.set("anthropic-ratelimit-tokens-reset", rfc3339(result.at + resetMs));
  }
}

/**
 * The limit a client is closest to: the fewest units remaining (of those whose state is known; the smallest limit
 * when none is). Null: no limit (an unlimited plan, the limiter unavailable).
 */
export function tightestOf(limits: readonly LimitResult[]): LimitResult | null {
  let best: LimitResult | null = null;
  for (const l of limits) {
    if (best === null) best = l;
    else if (l.remaining !== null && (best.remaining === null || l.remaining < best.remaining)) best = l;
    else if (l.remaining === null && best.remaining === null && l.limit < best.limit) best = l;
  }
  return best;
}

/** A wait as OpenAI writes its resets: `"250ms"`, `"1.5s"`, `"6m0s"`, `"1h2m3s"`. */
export function openaiDuration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.ceil(ms))}ms`;
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  // Whole milliseconds at most: a fraction of one rounds away, never to "1.s".
  const sec = `${Number(((ms % 60_000) / 1000).toFixed(3))}s`;
  if (h > 0) return `${h}h${m}m${sec}`;
  if (m > 0) return `${m}m${sec}`;
  return sec;
}

/** An instant as Anthropic writes its resets: RFC 3339 in UTC, whole seconds rounded up. */
export function rfc3339(at: number): string {
  return new Date(Math.ceil(at / 1000) * 1000).toISOString().replace(".000Z", "Z");
}
