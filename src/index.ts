// Placeholder Worker entry: 200 text on any path, proxies /echo* to env.ORIGIN; re-exports the DO.
export { RateLimiter } from "./limiter.ts";

export default {
  async fetch(request, env): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname.startsWith("/echo")) {
      return fetch(new Request(new URL(url.pathname + url.search, env.ORIGIN), request));
    }
    return new Response("strict-rate-limiter placeholder\n", {
      headers: { "content-type": "text/plain; charset=utf-8" },
    });
  },
} satisfies ExportedHandler<Env>;
