/**
 * The shape of the code in src/: functions and methods with more than four positional parameters, and functions
 * longer than 80 lines (CONTRIBUTING.md, "Code shape"). A request travels as one record, not a list of arguments.
 *
 *   npm run shape          # lists them; fails when more than five take more than four, or any is longer than 80
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import ts from "typescript";

/** At most this many parameters before a function counts as taking too many. */
export const MAX_PARAMETERS = 4;
/** At most this many functions in src/ may take more than {@link MAX_PARAMETERS}. */
export const MAX_WIDE_FUNCTIONS = 5;
/** No function in src/ is longer than this (lines, its signature and closing brace included). */
export const MAX_LINES = 80;

export interface Shape {
  /** `file:line name (n parameters)` of each function taking more than {@link MAX_PARAMETERS}. */
  readonly wide: string[];
  /** `file:line name (n lines)` of each function longer than {@link MAX_LINES}. */
  readonly long: string[];
}

/** The functions of the TypeScript files under `dir/src` (declaration files left out) that are too wide or too long. */
export function shapeOf(dir: string): Shape {
  const files: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith(".ts") && !e.name.endsWith(".d.ts")) files.push(p);
    }
  };
  walk(join(dir, "src"));
  const wide: string[] = [];
  const long: string[] = [];
  for (const f of files.sort()) {
    const src = ts.createSourceFile(f, readFileSync(f, "utf8"), ts.ScriptTarget.Latest, true);
    const line = (pos: number) => src.getLineAndCharacterOfPosition(pos).line + 1;
    const visit = (n: ts.Node): void => {
      if (ts.isFunctionLike(n) && "body" in n && n.body) {
        const name = n.name ? n.name.getText(src) : "(anonymous)";
        const at = `${relative(dir, f)}:${line(n.getStart(src))} ${name}`;
        if (n.parameters.length > MAX_PARAMETERS) wide.push(`${at} (${n.parameters.length} parameters)`);
        const lines = line(n.end) - line(n.getStart(src)) + 1;
        if (lines > MAX_LINES) long.push(`${at} (${lines} lines)`);
      }
      ts.forEachChild(n, visit);
    };
    visit(src);
  }
  return { wide, long };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const dir = resolve(import.meta.dirname, "..");
  const { wide, long } = shapeOf(dir);
  for (const w of wide) console.log(`more than ${MAX_PARAMETERS} parameters: ${w}`);
  for (const l of long) console.log(`longer than ${MAX_LINES} lines: ${l}`);
  console.log(
    `functions with more than ${MAX_PARAMETERS} parameters: ${wide.length} (at most ${MAX_WIDE_FUNCTIONS}); longer than ${MAX_LINES} lines: ${long.length} (none)`,
  );
  if (wide.length > MAX_WIDE_FUNCTIONS || long.length > 0) process.exitCode = 1;
}
