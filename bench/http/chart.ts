/**
 * @module The grants chart: hand-written SVG, one panel per limiter, bars of grants per 100 ms
 * and a line of grants in the trailing window, with the limit drawn in.
 */

import { maxInWindow } from "../../test/support/window.ts";

export interface ChartSeries {
  readonly name: string;
  /** Grant times in ms since the start of the overload. */
  readonly grants: readonly number[];
}

export interface ChartOptions {
  readonly title: string;
  readonly subtitle: string;
  readonly limit: number;
  readonly windowMs: number;
  readonly durationMs: number;
  readonly binMs: number;
}

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
const f = (n: number) => (Math.round(n * 10) / 10).toString();

export function grantsSvg(series: readonly ChartSeries[], o: ChartOptions): string {
  const width = 960;
  const left = 56;
  const right = 56;
  const panelH = 130;
  const gap = 34;
  const top = 64;
  const plotW = width - left - right;
  const height = top + series.length * (panelH + gap) + 30;
  const bins = Math.ceil(o.durationMs / o.binMs);
  const x = (ms: number) => left + (ms / o.durationMs) * plotW;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, Segoe UI, sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="${left}" y="24" font-size="16" font-weight="600">${esc(o.title)}</text>`,
    `<text x="${left}" y="44" fill="#555">${esc(o.subtitle)}</text>`,
  );
  // Left axis (grants per bin) and right axis (trailing-window count) share one scale across panels.
  let most = 1;
  for (const s of series) {
    const perBin = new Map<number, number>();
    for (const t of s.grants) perBin.set(Math.floor(t / o.binMs), (perBin.get(Math.floor(t / o.binMs)) ?? 0) + 1);
    for (const n of perBin.values()) most = Math.max(most, n);
  }
  const binMax = Math.max(5, Math.ceil(most / 5) * 5);
  const windowMax = o.limit * 2.2;
  series.forEach((s, p) => {
    const y0 = top + p * (panelH + gap) + 16;
    const yb = y0 + panelH;
    const counts = new Array<number>(bins).fill(0);
    for (const t of s.grants) {
      const b = Math.floor(t / o.binMs);
      if (b >= 0 && b < bins) counts[b] = (counts[b] ?? 0) + 1;
    }
    const yBin = (n: number) => yb - (n / binMax) * panelH;
    const yWin = (n: number) => yb - (Math.min(n, windowMax) / windowMax) * panelH;
    const sorted = [...s.grants].sort((a, b) => a - b);
    const worst = maxInWindow(sorted, o.windowMs);
    const over = worst > o.limit;
    out.push(
      `<text x="${left}" y="${y0 - 6}" font-weight="600">${esc(s.name)}</text>`,
      `<text x="${width - right}" y="${y0 - 6}" text-anchor="end" fill="${over ? "#c0392b" : "#1e7b34"}" font-weight="600">most in any ${o.windowMs / 1000} s: ${worst} (limit ${o.limit})${over ? ` — ${f(worst / o.limit)}× over` : " — never over"}</text>`,
      `<rect x="${left}" y="${y0}" width="${plotW}" height="${panelH}" fill="#fafafa" stroke="#ddd"/>`,
    );
    // Bars: grants per bin.
    const bw = plotW / bins;
    counts.forEach((n, i) => {
      if (n === 0) return;
      out.push(
        `<rect x="${f(left + i * bw)}" y="${f(yBin(n))}" width="${f(Math.max(bw - 0.6, 0.8))}" height="${f(yb - yBin(n))}" fill="#4a78b5"/>`,
      );
    });
    // Line: grants in the trailing window, sampled at every grant and every bin edge.
    const pts: string[] = [];
    let head = 0;
    let i = 0;
    for (let b = 0; b <= bins; b++) {
      const t = b * o.binMs;
      while (i < sorted.length && (sorted[i] as number) <= t) i++;
      while (head < i && (sorted[head] as number) <= t - o.windowMs) head++;
      pts.push(`${f(x(t))},${f(yWin(i - head))}`);
    }
    out.push(`<polyline points="${pts.join(" ")}" fill="none" stroke="#e67e22" stroke-width="1.6"/>`);
    // The limit, on the trailing-window scale.
    out.push(
      `<line x1="${left}" x2="${width - right}" y1="${f(yWin(o.limit))}" y2="${f(yWin(o.limit))}" stroke="#c0392b" stroke-dasharray="6 4" stroke-width="1.4"/>`,
      `<text x="${width - right + 4}" y="${f(yWin(o.limit) + 4)}" fill="#c0392b">limit</text>`,
      `<text x="${left - 6}" y="${y0 + 10}" text-anchor="end" fill="#4a78b5">${binMax}</text>`,
      `<text x="${left - 6}" y="${yb}" text-anchor="end" fill="#4a78b5">0</text>`,
      `<text x="${width - right + 4}" y="${y0 + 10}" fill="#e67e22">${f(windowMax)}</text>`,
    );
    for (let s2 = 0; s2 <= o.durationMs; s2 += 5000) {
      out.push(`<text x="${f(x(s2))}" y="${yb + 14}" text-anchor="middle" fill="#777">${s2 / 1000} s</text>`);
    }
  });
  const ly = height - 12;
  out.push(
    `<rect x="${left}" y="${ly - 9}" width="10" height="10" fill="#4a78b5"/><text x="${left + 14}" y="${ly}">grants per ${o.binMs} ms (left scale)</text>`,
    `<line x1="${left + 200}" x2="${left + 220}" y1="${ly - 4}" y2="${ly - 4}" stroke="#e67e22" stroke-width="2"/><text x="${left + 224}" y="${ly}">grants in the trailing ${o.windowMs / 1000} s (right scale)</text>`,
    `<line x1="${left + 470}" x2="${left + 490}" y1="${ly - 4}" y2="${ly - 4}" stroke="#c0392b" stroke-dasharray="6 4" stroke-width="1.4"/><text x="${left + 494}" y="${ly}">the limit: ${o.limit} per ${o.windowMs / 1000} s</text>`,
    "</svg>",
  );
  return `${out.join("\n")}\n`;
}
