/**
 * @module Client addresses as the limiter counts them: `CF-Connecting-IP` parsed strictly and
 * normalised, IPv4 and IPv4-mapped (or IPv4-compatible) IPv6 per IPv4 address, other IPv6 per
 * network of `ipv6_subnet` bits (docs/configuration.md, "Client addresses"). One IPv6 client owns
 * a /64 or more: counted per address, it could rotate through unlimited budgets. Pure.
 */

/** The default IPv6 network a client is counted by (bits): a /56, what a site is usually given. */
export const DEFAULT_IPV6_SUBNET = 56;

/** A parsed address: four bytes, or sixteen. */
type Bytes = readonly number[];

const IPV4_PART = /^(0|[1-9][0-9]{0,2})$/;
const HEXTET = /^[0-9a-fA-F]{1,4}$/;

/** The bytes of a dotted IPv4 address, or null. Leading zeros are refused (`010` reads as octal to some parsers). */
function parseIPv4(text: string): Bytes | null {
  const parts = text.split(".");
  if (parts.length !== 4) return null;
  const bytes: number[] = [];
  for (const p of parts) {
    if (!IPV4_PART.test(p)) return null;
    const n = Number(p);
    if (n > 255) return null;
    bytes.push(n);
  }
  return bytes;
}

/** The sixteen bytes of an IPv6 address (`::` compression, a dotted IPv4 tail), or null. A zone (`%eth0`) must be removed first. */
function parseIPv6(text: string): Bytes | null {
  if (text.length > 45 || !text.includes(":")) return null;
  const halves = text.split("::");
  if (halves.length > 2) return null;
  const groups = (s: string): string[] | null => (s === "" ? [] : s.split(":"));
  const head = groups(halves[0] as string);
  const tail = halves.length === 2 ? groups(halves[1] as string) : [];
  if (head === null || tail === null) return null;
  const words: number[][] = [];
  const all = [...head, ...tail];
  // A dotted IPv4 tail stands for the last two hextets.
  const last = all.at(-1);
  let v4: Bytes | null = null;
  if (last?.includes(".")) {
    v4 = parseIPv4(last);
    if (!v4) return null;
    all.pop();
    if (tail.length > 0) tail.pop();
    else head.pop();
  }
  for (const g of [...head, ...tail]) if (!HEXTET.test(g)) return null;
  const width = 8 - (v4 ? 2 : 0);
  const given = head.length + tail.length;
  if (halves.length === 2 ? given >= width : given !== width) return null;
  const zeros = width - given;
  for (const g of head) words.push(word(g));
  for (let i = 0; i < zeros; i++) words.push([0, 0]);
  for (const g of tail) words.push(word(g));
  const bytes = words.flat();
  if (v4) bytes.push(...v4);
  return bytes.length === 16 ? bytes : null;
}

function word(hextet: string): number[] {
  const n = Number.parseInt(hextet, 16);
  return [n >> 8, n & 0xff];
}

/** Whether the first `n` bytes are all `value`. */
function run(bytes: Bytes, from: number, to: number, value: number): boolean {
  for (let i = from; i < to; i++) if (bytes[i] !== value) return false;
  return true;
}

/** An IPv6 address in RFC 5952 form: lower case, the longest run of two or more zero hextets as `::`. */
function formatIPv6(bytes: Bytes): string {
  const words: number[] = [];
  for (let i = 0; i < 16; i += 2) words.push(((bytes[i] as number) << 8) | (bytes[i + 1] as number));
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (words[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && words[j] === 0) j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (ws: number[]) => ws.map((w) => w.toString(16)).join(":");
  if (best === -1) return hex(words);
  return `${hex(words.slice(0, best))}::${hex(words.slice(best + bestLen))}`;
}

/**
 * The client a request counts as, from its `CF-Connecting-IP`: an IPv4 address (`192.0.2.1`; also
 * for IPv4-mapped `::ffff:192.0.2.1` and IPv4-compatible `::192.0.2.1`), or an IPv6 network in
 * RFC 5952 form with its length (`2001:db8:0:ab00::/56`, the address's first `ipv6Subnet` bits).
 * Null for anything else — a missing header, a host name, junk — which no caller may put in one
 * shared bucket.
 */
export function clientOf(header: string | null | undefined, ipv6Subnet = DEFAULT_IPV6_SUBNET): string | null {
  if (header === null || header === undefined) return null;
  const text = header.trim();
  if (text === "" || text.length > 64) return null;
  const v4 = parseIPv4(text);
  if (v4) return v4.join(".");
  const zone = text.indexOf("%");
  // A zone id (`fe80::1%eth0`) names a link on the sender's host: the address is the same client.
  const bare = zone === -1 ? text : text.slice(0, zone);
  if (zone !== -1 && !/^%[A-Za-z0-9_.~-]{1,32}$/.test(text.slice(zone))) return null;
  const v6 = parseIPv6(bare);
  if (!v6) return null;
  // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible, but not :: or ::1): the IPv4 client a.b.c.d.
  const mapped = run(v6, 0, 10, 0) && v6[10] === 0xff && v6[11] === 0xff;
  const compatible = run(v6, 0, 12, 0) && !run(v6, 12, 15, 0);
  if (mapped || compatible) return v6.slice(12).join(".");
  const network = v6.map((b, i) => {
    const bits = Math.min(8, Math.max(0, ipv6Subnet - 8 * i));
    return b & ((0xff00 >> bits) & 0xff);
  });
  return `${formatIPv6(network)}/${ipv6Subnet}`;
}
