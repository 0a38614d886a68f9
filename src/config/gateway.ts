/**
 * @module Parses the gateway's settings (docs/llm.md, "The gateway"): where allowed requests go — `ORIGIN`, or
 * `origins`, each a path prefix and a URL — the headers the operator sets on every forwarded request
 * (`origin_headers`, an origin's `headers`; `${NAME}` names one of the Worker's secrets), and whether the client's
 * key goes on (`forward_key`). Secrets are named here, never read: the proxy reads their values from its env
 * (src/proxy/upstream.ts), so no configuration object, log line or admin answer can carry one.
 */

import { describe } from "../core/duration.ts";
import { array, nonEmptyString, type Obj, object, optionalBoolean, unknownFields } from "./fields.ts";
import { parseOrigin } from "./proxy-settings.ts";
import { ConfigError, type HeaderTemplate, HOP_BY_HOP, IDENTITY_HEADERS, type Upstream } from "./types.ts";

/** An HTTP field name (RFC 9110 §5.1: a token). */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** A secret's name as `${NAME}` writes it: a Worker binding's name. */
const SECRET = /\$\{([^}]*)\}/g;

/** What a binding's name may be (letters, digits, `_`, not starting with a digit). */
const BINDING = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Headers the operator may not set: the hop-by-hop fields, `host`, the body's length, the limiter's identity fields. */
const RESERVED = new Set([...HOP_BY_HOP, "host", "content-length", ...IDENTITY_HEADERS]);

/** What a header value may hold (RFC 9110 §5.5: visible characters, spaces and tabs, obs-text; as `Headers` takes it). */
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** What every origin inherits: `origin_headers`, and `forward_key` when it is given. */
interface Common {
  readonly headers: readonly HeaderTemplate[];
  readonly forwardKey: boolean | null;
}

/** The proxy's `ORIGIN`, `origins`, `origin_headers` and `forward_key`: the origins in the order they are matched. */
export function parseUpstreams(originUrl: URL | null, rl: Obj, root: string): readonly Upstream[] {
  const common: Common = {
    headers: rl.origin_headers === undefined ? [] : headerTemplates(rl.origin_headers, `${root}.origin_headers`),
    forwardKey: rl.forward_key === undefined ? null : optionalBoolean(rl.forward_key, `${root}.forward_key`, true),
  };
  const listed = rl.origins === undefined ? [] : array(rl.origins, `${root}.origins`);
  if (rl.origins !== undefined && listed.length === 0) {
    throw new ConfigError(`${root}.origins: expected at least one { path, url }, or leave it out and set ORIGIN`);
  }
  const upstreams = listed.map((o, i) => origin(o, `${root}.origins[${i}]`, common));
  for (let i = 1; i < upstreams.length; i++) {
    const u = upstreams[i] as Upstream;
    const shadowing = upstreams.slice(0, i).find((earlier) => u.path.startsWith(earlier.path));
    if (shadowing) {
      throw new ConfigError(
        `${root}.origins[${i}].path: ${JSON.stringify(u.path)} is never reached, ${JSON.stringify(shadowing.path)} before it matches first; list the longer path first`,
      );
    }
  }
  // ORIGIN alone is the one-origin form; beside `origins`, it serves the paths none of them matches.
  if (originUrl !== null)
    upstreams.push(upstream({ path: "/", url: originUrl, field: "ORIGIN" }, common.headers, common));
  // Neither: ORIGIN's own error, which names both.
  else if (upstreams.length === 0) parseOrigin(undefined, "ORIGIN");
  return upstreams;
}

/** One of `origins`: `{ path = "/openai/", url = "https://api.openai.com/v1", headers = { … } }`. */
function origin(value: unknown, field: string, common: Common): Upstream {
  const o = object(value, field);
  unknownFields(o, ["path", "url", "headers"], field);
  const path = nonEmptyString(o.path, `${field}.path`);
  if (!/^\/(?:[A-Za-z0-9._~-]+\/)*$/.test(path)) {
    throw new ConfigError(
      `${field}.path: expected a path prefix like "/openai/" (segments of letters, digits, ".", "_", "~" or "-", starting and ending with "/"), got ${JSON.stringify(path)}`,
    );
  }
  const url = parseOrigin(o.url, `${field}.url`);
  const own = o.headers === undefined ? [] : headerTemplates(o.headers, `${field}.headers`);
  // An origin's own header replaces the one `origin_headers` gives under the same name.
  const merged = [...common.headers.filter((c) => !own.some((h) => h.name === c.name)), ...own];
  return upstream({ path, url, field }, merged, common);
}

/** An origin with its headers; the client's key goes on only where it has none, unless `forward_key` says otherwise. */
function upstream(
  at: Pick<Upstream, "path" | "url" | "field">,
  headers: readonly HeaderTemplate[],
  common: Common,
): Upstream {
  return { ...at, headers, forwardKey: common.forwardKey ?? headers.length === 0 };
}

/** `{ authorization = "Bearer ${OPENAI_API_KEY}", … }`: each value text with `${NAME}` for a secret's value. */
export function headerTemplates(value: unknown, field: string): HeaderTemplate[] {
  const h = object(value, field);
  return Object.entries(h).map(([name, text]) => headerTemplate(name, text, `${field}.${name}`));
}

function headerTemplate(name: string, text: unknown, field: string): HeaderTemplate {
  const lower = name.toLowerCase();
  if (!TOKEN.test(name)) throw new ConfigError(`${field}: not a header name`);
  if (RESERVED.has(lower)) {
    throw new ConfigError(
      `${field}: the proxy sets or removes ${lower} itself; set another header (x-limiter-* tell the origin who is calling)`,
    );
  }
  if (typeof text !== "string") {
    throw new ConfigError(`${field}: expected a string such as "Bearer \${OPENAI_API_KEY}", got ${describe(text)}`);
  }
  const parts: (string | { readonly secret: string })[] = [];
  let last = 0;
  for (const m of text.matchAll(SECRET)) {
    const secret = m[1] as string;
    if (!BINDING.test(secret)) {
      throw new ConfigError(
        `${field}: \${${secret}} is not a secret's name (letters, digits and _, not starting with a digit)`,
      );
    }
    if (m.index > last) parts.push(text.slice(last, m.index));
    parts.push({ secret });
    last = m.index + m[0].length;
  }
  if (last < text.length) parts.push(text.slice(last));
  // The text the operator wrote (not a secret's value): checked here, the secrets' values when they are read.
  if (parts.some((p) => typeof p === "string" && p.includes("${"))) {
    throw new ConfigError(`${field}: a \${ without its closing } (write \${NAME} for the secret NAME)`);
  }
  if (!FIELD_VALUE.test(text)) {
    throw new ConfigError(`${field}: a header value holds only visible characters, spaces and tabs (no line break)`);
  }
  return { name: lower, parts, field };
}
