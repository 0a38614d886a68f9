// Smoke test: the Worker's fetch handler answers 200 and can reach the Node origin on 127.0.0.1.
import { env, exports } from "cloudflare:workers";
import { describe, expect, inject, it } from "vitest";

describe("Worker (smoke)", () => {
  it("answers 200 text", async () => {
    const res = await exports.default.fetch("http://example.com/");
    expect(res.status).toBe(200);
    expect(await res.text()).toContain("placeholder");
  });

  it("proxies /echo to the Node origin provided by globalSetup", async () => {
    expect(env.ORIGIN).toBe(inject("originUrl"));
    expect(env.ORIGIN).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    await fetch(`${env.ORIGIN}/__arrivals`, { method: "DELETE" });

    const res = await exports.default.fetch("http://example.com/echo/x?q=1", {
      method: "POST",
      body: "hello",
    });
    expect(res.status).toBe(200);
    const echoed = (await res.json()) as { method: string; url: string; body: string };
    expect(echoed).toMatchObject({ method: "POST", url: "/echo/x?q=1", body: "hello" });

    const arrivals = (await (await fetch(`${env.ORIGIN}/__arrivals`)).json()) as unknown[];
    expect(arrivals).toHaveLength(1);
  });
});
