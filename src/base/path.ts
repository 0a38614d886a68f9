/**
 * @module The path every rule matches and the origin receives: one RFC 3986 normalisation of the
 * URL's path, so that no spelling of a costly route can ride a cheaper or free rule. Pure.
 *
 * On top of what the URL parser already does (literal and `%2e` dot segments resolved, `\` read as
 * `/`): percent-encoded unreserved characters are decoded, other escapes upper-cased, runs of `/`
 * merged, dot segments removed again; encoded slashes and backslashes (`%2F`, `%5C`) are refused,
 * decoded, or kept, as configured; a segment that is a dot segment once its `;parameters` are
 * removed (`..;`, `.;x`) is refused; rules match the path with every segment's `;parameters` left
 * out (the forwarded path keeps them).
 */

/** What to do with `%2F` and `%5C` in a path (Envoy's `path_with_escaped_slashes_action`). */
export type EscapedSlashes = "reject" | "unescape" | "keep";

/** Every action, the default first. */
export const ESCAPED_SLASHES: readonly EscapedSlashes[] = ["reject", "unescape", "keep"];

/** A normalised path. */
export interface NormalPath {
  /** What the origin receives. */
  readonly path: string;
  /** What cost rules, routes and the admin path are matched against: `path` without `;parameters`. */
  readonly match: string;
}

/** A path the limiter refuses (`400`): it could name different routes to different servers. */
export class PathError extends Error {
  override readonly name = "PathError";
}

const UNRESERVED = /[A-Za-z0-9._~-]/;

/**
 * Normalises a URL's `pathname` (as `new URL(...).pathname` gives it: starting with `/`).
 *
 * @throws PathError for an encoded slash or backslash under `"reject"`, or a dot segment with parameters
 */
export function normalizePath(pathname: string, escapedSlashes: EscapedSlashes = "reject"): NormalPath {
  // Most paths need nothing: no escapes, no parameters, no empty segments.
  if (!/[%;]|\/\//.test(pathname)) return { path: pathname, match: pathname };
  const decoded = pathname.replace(/%([0-9A-Fa-f]{2})/g, (sequence, hex: string) => {
    const code = Number.parseInt(hex, 16);
    const c = String.fromCharCode(code);
    if (UNRESERVED.test(c)) return c;
    if (code === 0x2f || code === 0x5c) {
      if (escapedSlashes === "reject") {
        throw new PathError(
          `The path holds an encoded ${code === 0x2f ? "slash (%2F)" : "backslash (%5C)"}, which servers read differently; send it unencoded.`,
        );
      }
      if (escapedSlashes === "unescape") return "/";
      return sequence.toUpperCase();
    }
    return sequence.toUpperCase();
  });
  const segments: string[] = [];
  for (const segment of decoded.split("/").slice(1)) {
    const bare = withoutParameters(segment);
    if (bare !== segment && (bare === "." || bare === "..")) {
      throw new PathError(
        `The path has a dot segment with parameters (${JSON.stringify(segment)}), which servers read differently.`,
      );
    }
    if (segment === "..") segments.pop();
    else if (segment !== "." && segment !== "") segments.push(segment);
  }
  // A trailing "/", "/." or "/.." ends the path in a slash (RFC 3986, 5.2.4).
  const last = decoded.slice(decoded.lastIndexOf("/") + 1);
  const trailing = last === "" || last === "." || last === "..";
  const path = `/${segments.join("/")}${trailing && segments.length > 0 ? "/" : ""}`;
  const match = path.includes(";") ? path.split("/").map(withoutParameters).join("/") : path;
  return { path, match };
}

function withoutParameters(segment: string): string {
  const at = segment.indexOf(";");
  return at === -1 ? segment : segment.slice(0, at);
}
