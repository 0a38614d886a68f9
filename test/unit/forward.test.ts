// The proxy's own request to the origin, seen through a fetcher double: where it goes (ORIGIN's path
// prefix joined with the normalised path), what it carries, and how an unreachable origin is worded.
// The integration tests (test/integration/proxy.test.ts) send the same through a real origin over HTTP.
import { describe, expect, it } from "vitest";
import { parseConfig } from "../../src/config/parse.ts";
import { forward } from "../../src/proxy/forward.ts";
import { type Target, targetsOf } from "../../src/proxy/upstream.ts";

const LIMITS = { limits: [{ limit: 100, window: "1s" }] };

/** Forwards `request` to ORIGIN `origin`; resolves to what the origin received (null: nothing) and the answer. */
async function send(
  origin: string,
  request: Request,
  path: string,
  fetcher?: (r: Request) => Promise<Response>,
): Promise<{ sent: Request | null; res: Response }> {
  let sent: Request | null = null;
  const config = parseConfig({ ORIGIN: origin, RATE_LIMIT: LIMITS });
  const res = await forward(request, {
    target: targetsOf(config, {})[0] as Target,
    send:
      fetcher ??
      (async (r) => {
        sent = r;
        return new Response("ok");
      }),
    incoming: new URL(request.url),
    path,
    keySource: config.key,
    caller: null,
    timeoutMs: config.originTimeoutMs,
  });
  return { sent, res };
}

describe("forward: where the request goes", () => {
  it.each([
    ["https://o.example", "/v1/x"],
    ["https://o.example/", "/v1/x"],
    ["https://o.example/base", "/base/v1/x"],
    ["https://o.example/base/", "/base/v1/x"],
    ["https://o.example/base//", "/base/v1/x"],
    ["https://o.example/a.b/base", "/a.b/base/v1/x"],
  ])("ORIGIN %s + /v1/x → %s, the query kept", async (origin, pathname) => {
    const { sent } = await send(origin, new Request("https://w.example/v1/x?q=1&r"), "/v1/x");
    expect(sent).not.toBeNull();
    const url = new URL((sent as unknown as Request).url);
    expect(url.origin).toBe("https://o.example");
    expect(url.pathname).toBe(pathname);
    expect(url.search).toBe("?q=1&r");
  });

  it("a GET whose body is an empty stream goes out without one (a GET may not carry a body)", async () => {
    // What a runtime may hand over for `GET` with `Content-Length: 0`: the fetch would throw on the stream.
    const get = {
      method: "GET",
      url: "https://w.example/v1/x",
      headers: new Headers(),
      body: new ReadableStream(),
    } as unknown as Request;
    for (const method of ["GET", "HEAD"]) {
      const { sent, res } = await send("https://o.example", { ...get, method } as unknown as Request, "/v1/x");
      expect(res.status).toBe(200);
      expect((sent as unknown as Request).method).toBe(method);
      expect((sent as unknown as Request).body).toBeNull();
    }
  });
});

describe("forward: an origin that cannot be reached", () => {
  it.each([
    ["Network connection lost.", "Network connection lost"],
    ["refused...", "refused"],
    ["a.b..", "a.b"],
    ["no period", "no period"],
  ])("the fetcher's %j reads as one sentence: %j + '.'", async (message, reason) => {
    const { res } = await send("https://o.example", new Request("https://w.example/x"), "/x", async () => {
      throw new Error(message);
    });
    expect(res.status).toBe(502);
    const body = (await res.json()) as { detail: string };
    expect(body.detail).toBe(`The origin could not be reached: ${reason}.`);
  });
});
