/** @module The isolate's deny cache: an entry answers until its `until` (or `recheckAt`), and the cache stays bounded. */

import { describe, expect, it } from "vitest";
import { type Blocked, DenyCache } from "../../src/client/deny-cache.ts";

function blocked(until: number, recheckAt?: number): Blocked {
  return { until, freeAt: [until], retryAt: new Map(), ...(recheckAt === undefined ? {} : { recheckAt }) };
}

describe("DenyCache", () => {
  it("answers with the entry itself strictly before its until, and forgets it from until on", () => {
    const cache = new DenyCache();
    const entry = blocked(1000);
    cache.set("k", entry, 0);
    expect(cache.get("k", 0)).toBe(entry);
    expect(cache.get("k", 999)).toBe(entry);
    expect(cache.size).toBe(1);
    expect(cache.get("k", 1000)).toBeUndefined();
    expect(cache.size).toBe(0); // dropped on read
    // Gone for good: an earlier clock does not bring it back.
    expect(cache.get("k", 500)).toBeUndefined();
  });

  it("asks the object again from recheckAt on, even while until is later", () => {
    const cache = new DenyCache();
    cache.set("k", blocked(10_000, 300), 0);
    expect(cache.get("k", 299)?.until).toBe(10_000);
    expect(cache.get("k", 300)).toBeUndefined();
    expect(cache.size).toBe(0);
    expect(cache.get("k", 299)).toBeUndefined();
  });

  it("knows nothing of keys never set, and delete forgets one key only", () => {
    const cache = new DenyCache();
    expect(cache.get("nobody", 0)).toBeUndefined();
    cache.set("a", blocked(1000), 0);
    cache.set("b", blocked(1000), 0);
    cache.delete("a");
    cache.delete("nobody");
    expect(cache.get("a", 0)).toBeUndefined();
    expect(cache.get("b", 0)?.until).toBe(1000);
    expect(cache.size).toBe(1);
  });

  it("deleteKey forgets a key's entry and its routes' (key NUL route), and no other key's", () => {
    const cache = new DenyCache();
    for (const name of ["key:a", "key:a\u0000search", "key:a\u0000export", "key:ab", "key:ab\u0000search"]) {
      cache.set(name, blocked(1000), 0);
    }
    cache.deleteKey("key:a");
    expect(["key:a", "key:a\u0000search", "key:a\u0000export"].map((n) => cache.get(n, 0))).toEqual([
      undefined,
      undefined,
      undefined,
    ]);
    expect(cache.get("key:ab", 0)).toBeDefined();
    expect(cache.get("key:ab\u0000search", 0)).toBeDefined();
    expect(cache.size).toBe(2);
  });

  it("replaces a key's entry in place: no room is made, and the key keeps its age", () => {
    const cache = new DenyCache(2);
    cache.set("a", blocked(1000), 0);
    cache.set("b", blocked(1000), 0);
    cache.set("a", blocked(2000), 10);
    expect(cache.size).toBe(2);
    expect(cache.get("a", 10)?.until).toBe(2000);
    expect(cache.get("b", 10)?.until).toBe(1000);
    // "a" is still the oldest inserted, so it makes room for a new key.
    cache.set("c", blocked(1000), 20);
    expect([cache.get("a", 20), cache.get("b", 20)?.until, cache.get("c", 20)?.until]).toEqual([undefined, 1000, 1000]);
  });

  it("when full, drops every expired entry first (those at their until too), and only then the oldest", () => {
    const cache = new DenyCache(3);
    cache.set("old", blocked(5000), 0);
    cache.set("expired", blocked(100), 0);
    cache.set("expired-too", blocked(50), 0);
    cache.set("new", blocked(5000), 100); // at 100 both expired entries are gone
    expect(cache.size).toBe(2);
    expect(cache.get("old", 100)?.until).toBe(5000);
    expect(cache.get("new", 100)?.until).toBe(5000);
  });

  it("when full of live entries, drops the oldest inserted: never more than the bound", () => {
    const cache = new DenyCache(2);
    cache.set("a", blocked(5000), 0);
    cache.set("b", blocked(5000), 0);
    cache.set("c", blocked(5000), 1);
    expect(cache.size).toBe(2);
    expect(cache.get("a", 1)).toBeUndefined();
    cache.set("d", blocked(5000), 2);
    expect(cache.size).toBe(2);
    expect([cache.get("b", 2), cache.get("c", 2)?.until, cache.get("d", 2)?.until]).toEqual([undefined, 5000, 5000]);
  });

  it("holds 10 000 keys by default", () => {
    const cache = new DenyCache();
    for (let i = 0; i < 10_001; i++) cache.set(`k${i}`, blocked(5000), 0);
    expect(cache.size).toBe(10_000);
    expect(cache.get("k0", 0)).toBeUndefined();
    expect(cache.get("k1", 0)?.until).toBe(5000);
  });
});
