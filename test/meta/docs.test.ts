// The documentation's links: every relative link in README.md, docs/, CONTRIBUTING.md and BENCHMARKS.md names a file
// that exists and, with a #fragment, a heading of that file (GitHub's anchors). The README stays a front door;
// BENCHMARKS.md stays short and holds every figure the README quotes.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, normalize } from "node:path";
import { describe, expect, it } from "vitest";

const FILES = [
  "README.md",
  "CONTRIBUTING.md",
  "BENCHMARKS.md",
  "CHANGELOG.md",
  ...readdirSync("docs")
    .filter((f) => f.endsWith(".md"))
    .map((f) => `docs/${f}`),
];

/** GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`. */
function anchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, "")
    .replace(/ /g, "-");
}

/** The anchors of a Markdown file's headings (outside code blocks). */
function anchorsOf(file: string): Set<string> {
  const text = readFileSync(file, "utf8").replace(/```[\s\S]*?```/g, "");
  return new Set([...text.matchAll(/^#{1,6} (.+)$/gm)].map((m) => anchor(m[1] ?? "")));
}

/** Every Markdown link target `[text](target)` outside code blocks. */
function linksOf(file: string): string[] {
  const text = readFileSync(file, "utf8").replace(/```[\s\S]*?```/g, "");
  return [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1] ?? "");
}

describe("documentation links", () => {
  it("every relative link names a file that exists, and a heading of it", () => {
    const broken: string[] = [];
    let checked = 0;
    for (const file of FILES) {
      for (const target of linksOf(file)) {
        if (/^[a-z]+:/.test(target)) continue;
        const [path = "", fragment] = target.split("#");
        const resolved = path === "" ? file : normalize(join(dirname(file), path));
        checked++;
        if (!existsSync(resolved)) broken.push(`${file}: ${target} (no ${resolved})`);
        else if (fragment !== undefined && resolved.endsWith(".md") && !anchorsOf(resolved).has(fragment)) {
          broken.push(`${file}: ${target} (no heading #${fragment} in ${resolved})`);
        }
      }
    }
    expect(broken).toEqual([]);
    expect(checked).toBeGreaterThan(20);
  });

  it("anchors are GitHub's", () => {
    expect(anchor("In your Worker: `createLimiter()` and `rateLimit()`")).toBe(
      "in-your-worker-createlimiter-and-ratelimit",
    );
    expect(anchor("`RATE_LIMIT` settings")).toBe("rate_limit-settings");
  });

  it("BENCHMARKS.md holds current figures only: at most 300 lines, and every figure the README quotes", () => {
    const benchmarks = readFileSync("BENCHMARKS.md", "utf8");
    expect(benchmarks.split("\n").length).toBeLessThanOrEqual(300);
    const readme = readFileSync("README.md", "utf8");
    const section = readme.slice(
      readme.indexOf("## Benchmarks"),
      readme.indexOf("\n## ", readme.indexOf("## Benchmarks") + 1),
    );
    const figures = [...section.matchAll(/\d+\.\d+/g)].map((m) => m[0]);
    expect(figures.length).toBeGreaterThan(10);
    expect(figures.filter((f) => !benchmarks.includes(f))).toEqual([]);
  });

  it("the README is a front door: at most 300 lines, with a map of docs/", () => {
    const readme = readFileSync("README.md", "utf8");
    expect(readme.split("\n").length).toBeLessThanOrEqual(300);
    for (const doc of ["docs/configuration.md", "docs/operating.md", "docs/design.md", "docs/http.md"]) {
      expect(readme).toContain(`](${doc})`);
    }
  });
});

describe("docs/configuration.md's table of contents", () => {
  /** The `##`–`####` headings of a Markdown text (outside code blocks), as GitHub anchors. */
  const headings = (text: string) =>
    [...text.replace(/```[\s\S]*?```/g, "").matchAll(/^#{2,4} (.+)$/gm)].map((m) => anchor(m[1] ?? ""));

  it("lists every section, in order, above the first one", () => {
    const text = readFileSync("docs/configuration.md", "utf8");
    const firstSection = text.search(/^## /m);
    const contents = [...text.slice(0, firstSection).matchAll(/^ *- \[[^\]]+\]\(#([^)]+)\)/gm)].map((m) => m[1]);
    expect(contents).toEqual(headings(text));
    expect(contents.length).toBeGreaterThan(20);
  });

  it("the README's map links its main sections", () => {
    const readme = readFileSync("README.md", "utf8");
    for (const section of ["rate_limit-settings", "signed-keys", "accounts", "concurrency", "quotas-and-credits"]) {
      expect(readme).toContain(`](docs/configuration.md#${section})`);
    }
  });
});

describe("README's code labelled with a file", () => {
  /** Each fenced block of a Markdown text with the last non-empty line before it (its label). */
  const blocks = (text: string) =>
    [...text.matchAll(/(?:^|\n)([^\n]*)\n+```\w*\n([\s\S]*?)```/g)].map((m) => ({
      label: m[1] ?? "",
      code: m[2] ?? "",
    }));

  it("a block labelled `[path](path):` is that file, whole; no other label ends in a path of the repository", () => {
    const shown: string[] = [];
    const loose: string[] = [];
    for (const { label, code } of blocks(readFileSync("README.md", "utf8"))) {
      const named = /\[([^\]\s]+)\]\(\1\)\)?:\s*$/.exec(label)?.[1];
      if (named !== undefined) {
        expect(code, `README's block labelled ${named}`).toBe(readFileSync(named, "utf8"));
        shown.push(named);
      } else {
        // A label ending in a path of this repository, as "A hono app (examples/hono-app):" did, names a file too.
        const path = /(?:^|[\s(`])([\w.-]+\/[\w./-]*[\w-])`?\)?:\s*$/.exec(label)?.[1];
        if (path !== undefined && existsSync(path)) loose.push(label);
      }
    }
    expect(loose).toEqual([]);
    expect(shown).toContain("examples/hono-app/src/index.ts");
  });
});
