// The wrangler configurations' comments point at the documentation by file and heading — `docs/operating.md,
// "Analytics"` — and every such pointer names a heading that file has (sections move; the comments must follow).
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const CONFIGS = [
  "wrangler.toml",
  ...readdirSync("examples").flatMap((dir) =>
    ["wrangler.toml", "wrangler.jsonc"].map((f) => join("examples", dir, f)).filter((f) => existsSync(f)),
  ),
];

/** A config's whole-line comments (`#` in TOML, `//` in JSONC), joined into one text so a pointer may wrap. */
function commentsOf(file: string): string {
  const marker = file.endsWith(".toml") ? "#" : "//";
  return readFileSync(file, "utf8")
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line.startsWith(marker))
    .map((line) => line.slice(marker.length).trim())
    .join(" ");
}

/** Every `FILE, "Heading"` pointer in `text`: README (or README.md) or a file of docs/, then a quoted heading. */
function pointersIn(text: string): { file: string; heading: string }[] {
  return [...text.matchAll(/\b(README(?:\.md)?|docs\/[\w-]+\.md), "([^"]+)"/g)].map((m) => ({
    file: m[1] === "README" ? "README.md" : (m[1] as string),
    heading: m[2] as string,
  }));
}

/** A Markdown file's headings, as written (outside code blocks). */
function headingsOf(file: string): Set<string> {
  const text = readFileSync(file, "utf8").replace(/```[\s\S]*?```/g, "");
  return new Set([...text.matchAll(/^#{1,6} (.+)$/gm)].map((m) => (m[1] as string).trim()));
}

describe("wrangler configurations' comments", () => {
  it("name headings the documentation has", () => {
    const broken: string[] = [];
    let checked = 0;
    for (const config of CONFIGS) {
      for (const { file, heading } of pointersIn(commentsOf(config))) {
        checked++;
        if (!existsSync(file) || !headingsOf(file).has(heading)) broken.push(`${config}: ${file}, "${heading}"`);
      }
    }
    expect(broken).toEqual([]);
    expect(checked).toBeGreaterThanOrEqual(5);
  });

  it("find pointers as written: README without .md, a heading wrapped over two comment lines", () => {
    expect(pointersIn('Operators (README, "Operating it"): and docs/configuration.md, "In front of your')).toEqual([
      { file: "README.md", heading: "Operating it" },
    ]);
    expect(
      pointersIn(commentsOf("wrangler.toml")).some(
        (p) => p.heading === "In front of your origin: the proxy's `wrangler.toml`",
      ),
    ).toBe(true);
  });
});
