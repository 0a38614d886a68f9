// Client addresses as the limiter counts them: IPv4 per address, IPv4-mapped and -compatible IPv6 as their IPv4
// address, other IPv6 per network of ipv6_subnet bits in one canonical spelling, and null (never a shared bucket)
// for anything malformed.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { clientOf, DEFAULT_IPV6_SUBNET } from "../../src/base/address.ts";

describe("clientOf", () => {
  it("IPv4: the address itself", () => {
    expect(clientOf("192.0.2.1")).toBe("192.0.2.1");
    expect(clientOf(" 203.0.113.255 ")).toBe("203.0.113.255");
    expect(clientOf("0.0.0.0")).toBe("0.0.0.0");
  });

  it("IPv6: the /56 network by default, in one spelling whatever the case, zeros and compression", () => {
    expect(DEFAULT_IPV6_SUBNET).toBe(56);
    const one = "2001:db8:0:ab00::/56";
    for (const spelling of [
      "2001:db8:0:ab00::1",
      "2001:DB8:0:AB00::1",
      "2001:0db8:0000:ab00:0000:0000:0000:0001",
      "2001:db8::ab00:0:0:0:1",
      "2001:db8:0:abff:ffff:ffff:ffff:ffff",
      "2001:db8:0:ab12::",
    ]) {
      expect(clientOf(spelling), spelling).toBe(one);
    }
    // /56 boundaries: the next network is another client.
    expect(clientOf("2001:db8:0:aa00::1")).toBe("2001:db8:0:aa00::/56");
    expect(clientOf("2001:db8:0:ac00::")).toBe("2001:db8:0:ac00::/56");
    expect(clientOf("2001:db8:0:abff::")).toBe(one);
  });

  it("ipv6_subnet picks the network length, 32 to 128", () => {
    expect(clientOf("2001:db8:1234:5678:9abc::1", 32)).toBe("2001:db8::/32");
    expect(clientOf("2001:db8:1234:5678:9abc::1", 48)).toBe("2001:db8:1234::/48");
    expect(clientOf("2001:db8:1234:5678:9abc::1", 64)).toBe("2001:db8:1234:5678::/64");
    expect(clientOf("2001:db8:1234:5678:9abc::1", 60)).toBe("2001:db8:1234:5670::/60");
    expect(clientOf("2001:db8:1234:5678:9abc::1", 128)).toBe("2001:db8:1234:5678:9abc::1/128");
  });

  it("IPv4-mapped and IPv4-compatible IPv6: the IPv4 client, and two mapped addresses are two clients", () => {
    expect(clientOf("::ffff:192.0.2.1")).toBe("192.0.2.1");
    expect(clientOf("::FFFF:c000:0201")).toBe("192.0.2.1");
    expect(clientOf("0:0:0:0:0:ffff:192.0.2.1")).toBe("192.0.2.1");
    expect(clientOf("::ffff:198.51.100.7")).toBe("198.51.100.7");
    expect(clientOf("::192.0.2.1")).toBe("192.0.2.1");
    expect(clientOf("::ffff:192.0.2.1")).not.toBe(clientOf("::ffff:192.0.2.2"));
  });

  it("the canonical form compresses the longest run of zero hextets (the first of equal ones), never a single one", () => {
    expect(clientOf("2001:0:0:1:0:0:0:1", 128)).toBe("2001:0:0:1::1/128");
    expect(clientOf("1:0:0:2:0:0:3:4", 128)).toBe("1::2:0:0:3:4/128");
    expect(clientOf("2001:db8:0:1:1:1:1:1", 128)).toBe("2001:db8:0:1:1:1:1:1/128");
    expect(clientOf("1:2:3:4:5:6:7:0", 128)).toBe("1:2:3:4:5:6:7:0/128");
    expect(clientOf("1:2:3:4:5:6:0:0", 128)).toBe("1:2:3:4:5:6::/128");
    expect(clientOf("0:0:1:2:3:4:5:6", 128)).toBe("::1:2:3:4:5:6/128");
  });

  it("only ::ffff:0:0/96 is IPv4-mapped: its neighbours are IPv6", () => {
    expect(clientOf("::fffe:192.0.2.1", 128)).toBe("::fffe:c000:201/128");
    expect(clientOf("::1:ffff:192.0.2.1", 128)).toBe("::1:ffff:c000:201/128");
    expect(clientOf("1::ffff:192.0.2.1", 128)).toBe("1::ffff:c000:201/128");
  });

  it("::, ::1 and a zone id", () => {
    expect(clientOf("::")).toBe("::/56");
    expect(clientOf("::1")).toBe("::/56");
    expect(clientOf("::1", 128)).toBe("::1/128");
    expect(clientOf("fe80::1%eth0")).toBe("fe80::/56");
    expect(clientOf("fe80::1%25")).toBe("fe80::/56");
  });

  it("malformed or missing: null", () => {
    for (const bad of [
      null,
      undefined,
      "",
      "  ",
      "unknown",
      "localhost",
      "192.0.2",
      "192.0.2.1.5",
      "192.0.2.256",
      "192.000.2.1",
      "010.1.1.1",
      "1.2.3.-4",
      "1.2.3.4 5",
      "2001:db8::1::2",
      "2001:db8:0:0:0:0:0:0:1",
      "2001:db8:0:0:0:0:1",
      "2001:db8::g",
      "12345::",
      ":1::",
      "1::2:",
      "fe80::1%",
      "fe80::1%eth 0",
      "::ffff:192.0.2.256",
      "::ffff:1.2.3",
      "[2001:db8::1]",
      "2001:db8::1/64",
      "a".repeat(65),
      `1:2:3:4:5:6:7:8%${"z".repeat(40)}`,
      "1:2:3:4:5:6:7:8:9",
      "1:2:3:4:5:6:7::8",
      "::1:2:3:4:5:6:7:8",
      "1::2::3",
    ]) {
      expect(clientOf(bad), String(bad)).toBeNull();
    }
  });

  it("property: an IPv6 address and its variants (case, zeros, full form) are one client", () => {
    const word = fc.integer({ min: 0, max: 0xffff });
    fc.assert(
      fc.property(fc.array(word, { minLength: 8, maxLength: 8 }), fc.integer({ min: 32, max: 128 }), (ws, bits) => {
        // Mapped and compatible addresses count as IPv4: leave them to the test above.
        fc.pre(!ws.slice(0, 5).every((w) => w === 0));
        const full = ws.map((w) => w.toString(16).padStart(4, "0")).join(":");
        const upper = ws.map((w) => w.toString(16).toUpperCase()).join(":");
        const c = clientOf(full, bits);
        expect(c).not.toBeNull();
        expect(clientOf(upper, bits)).toBe(c);
        expect(c?.endsWith(`/${bits}`)).toBe(true);
        // The network is canonical: parsing it again gives itself.
        expect(clientOf(c?.slice(0, c.lastIndexOf("/")), bits)).toBe(c);
      }),
    );
  });

  it("property: IPv4 addresses are counted one by one, plain or mapped", () => {
    const byte = fc.integer({ min: 0, max: 255 });
    fc.assert(
      fc.property(fc.tuple(byte, byte, byte, byte), (b) => {
        const dotted = b.join(".");
        expect(clientOf(dotted)).toBe(dotted);
        expect(clientOf(`::ffff:${dotted}`)).toBe(dotted);
      }),
    );
  });
});
