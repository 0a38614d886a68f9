/**
 * @module A discrete-event model of one key's leases with regional lease holders (issue 51), for `bench:sim` with
 * regions and its unit test. The key's object is the real pure core (`KeyLog`), the isolates size their asks with the
 * client's own rules (`leaseToAsk`, `refillDue`); the holder between them exists only here. Time is integer ms, every
 * clock runs at one rate, a message takes half its round trip each way, and a unit's use is the moment it is spent:
 * at the object for a per-request grant, at the holder or isolate that spends it from a lease. So windows over N are
 * judged by `maxInWindow` over real use times, with no jitter to allow for.
 *
 * A holder leases from the object exactly as an isolate does and sub-leases to its region's isolates. A sub-lease
 * ends when the holder's lease ends (measured from the isolate's own ask, which came before the holder's answer), and
 * an isolate's reported uses are re-dated to the holder's lease by the time the holder granted the sub-lease: both
 * never earlier than a use ("Future-dated grants"). `holders: "broken"` dates a sub-lease at the holder instead (a
 * fresh lifetime from the isolate's ask): the sweep must catch it.
 */

import { countRequest, leaseToAsk, type RateCounter, refillDue, sizedByObject } from "../../src/client/lease-sizing.ts";
import { IDLE_RETURN_MS } from "../../src/client/settlement.ts";
import {
  type Decision,
  FIRST_LEASE_UNITS,
  KeyLog,
  type LimitSpec,
  NO_LEASE_BELOW_FREE,
  ringSlackMs,
  type Settlement,
} from "../../src/core/index.ts";
import { Events } from "./events.ts";

/** One request of the key: when it arrives and at which isolate. */
export interface KeyRequest {
  readonly at: number;
  readonly isolate: number;
}

/** A vanishing: at `at`, isolate (or region's holder) `index` loses what it holds. */
export interface Vanishing {
  readonly at: number;
  readonly index: number;
}

export interface KeyModel {
  readonly limits: readonly LimitSpec[];
  /** The key's requests in time order (integer ms). */
  readonly requests: readonly KeyRequest[];
  readonly regionOf: (isolate: number) => number;
  /** Round trips (ms): isolate straight to the key's object, isolate to its region's holder, holder to the object. */
  readonly isolateHomeMs: (isolate: number) => number;
  readonly isolateHolderMs: (isolate: number) => number;
  readonly holderHomeMs: (region: number) => number;
  readonly isolateChurn: readonly Vanishing[];
  readonly holderChurn: readonly Vanishing[];
  readonly holders: "off" | "on" | "broken";
  /** The plan's lease lifetime (ms) and `leases.max_units`. */
  readonly lifetimeMs: number;
  readonly maxUnits: number;
  /** Sees every call at the key's object: when, from whom (`i3`, `h1`), the cost, units asked and leased. */
  readonly onHomeCall?: (t: number, from: string, cost: number, asked: number, leased: number) => void;
}

export interface KeyOutcome {
  /** Per request: granted, and what it waited for (ms). */
  readonly granted: readonly boolean[];
  readonly addedMs: readonly number[];
  /** When each granted unit was used. */
  readonly uses: readonly number[];
  readonly homeCalls: number;
  readonly holderCalls: number;
  /** Units the object leased (to isolates or holders), spent from leases, given back, lost with what vanished. */
  readonly leased: number;
  readonly spent: number;
  readonly returned: number;
  readonly stranded: number;
  /** Rows the key's object wrote (its ring slots: grants, leases, settlements, give-backs). */
  readonly rows: number;
}

interface Lease {
  /** The holder's lease this came from (a sub-lease), or null (straight from the object). */
  readonly from: HolderLease | null;
  readonly holder: Holder | null;
  /** The holder's clock when it granted the sub-lease. */
  readonly grantAt: number;
  /**
   * What the isolate adds to its own offsets (from `sentAt`) to settle at the object: for a sub-lease, the time from
   * the holder's ask to its grant (the holder passes it with the sub-lease); 0 for a lease from the object.
   */
  readonly offsetMs: number;
  readonly sentAt: number;
  readonly issuedAt: number;
  readonly recordedAt: readonly number[];
  readonly endsAt: number;
  left: number;
  used: number;
  lastUseMs: number;
}

interface HolderLease {
  readonly sentAt: number;
  readonly issuedAt: number;
  readonly recordedAt: readonly number[];
  readonly endsAt: number;
  free: number;
  /** Sub-leased units not yet reported back. */
  outstanding: number;
  used: number;
  lastUseMs: number;
  giveBack: number;
}

interface Isolate {
  readonly counter: RateCounter;
  leases: Lease[];
  refilling: boolean;
  /** Until when it asks the key's object itself (its holder said the key is near a limit). */
  directUntil: number;
  farBelow: readonly LimitSpec[] | null;
  deniedUntil: number;
}

interface Holder {
  readonly counter: RateCounter;
  leases: HolderLease[];
  refilling: boolean;
  farBelow: readonly LimitSpec[] | null;
  /** When it last served an isolate. */
  servedAt: number;
}

interface Report {
  readonly lease: Lease;
  readonly used: number;
  readonly lastUseMs: number;
  readonly unused: number;
}

interface Answer {
  readonly allowed: boolean;
  readonly lease: Lease | null;
  /** The key is near a limit: ask its object directly for a while. */
  readonly aside: boolean;
  /** The limits the key is far below, as the deciding side last saw them (sizes the isolate's next ask). */
  readonly farBelow: readonly LimitSpec[] | null;
  /** Before this (ms) no request of cost 1 can pass: the isolate's deny cache (the object's `blockedUntil`). */
  readonly blockedUntil: number;
}

/**
 * Counts `n` uses an isolate reports at `now` into a holder's rate: the region's rate, which its asks are sized by, is
 * what its isolates spend. Into the 10 s estimate only: reported together, they are no burst.
 */
function countUses(c: RateCounter, now: number, n: number): void {
  const dt = Math.max(0, now - c.seenAt);
  c.score = c.score * Math.exp(-dt / 10_000) + n;
  c.burst = Math.max(1, c.burst * Math.exp(-dt / 100));
  c.seenAt = now;
}

const half = (rtt: number) => Math.ceil(rtt / 2);
const newCounter = (t: number): RateCounter => ({ score: 0, burst: 0, seenAt: t, firstSeen: t });
/** How long an isolate asks the key's object itself after its holder stepped aside (ms). */
const ASIDE_MS = 1000;
/**
 * A holder is an object and can wake itself: when the key is not far below its limits and its region has asked
 * nothing for this long (ms), it gives back what it holds unspent (one call), so that a burst elsewhere finds it.
 */
const IDLE_GIVE_BACK_MS = 1000;
/** A sub-lease carries what its isolate spends in this long (ms), at the rate its ask shows. */
const SUB_SPEND_MS = 5000;

/** Runs one key's requests through isolates (and holders) and the key's object. */
export function simulateKey(m: KeyModel): KeyOutcome {
  const log = new KeyLog(m.limits);
  const events = new Events();
  const youngMs = ringSlackMs(m.limits);
  const granted = m.requests.map(() => false);
  const addedMs = m.requests.map(() => Number.NaN);
  const uses: number[] = [];
  let homeCalls = 0;
  let holderCalls = 0;
  let leased = 0;
  let spent = 0;
  let returned = 0;
  let stranded = 0;
  let rows = 0;
  const isolates = new Map<number, Isolate>();
  const holders = new Map<number, Holder>();

  /** Far below every limit, as the object's last answer shows (the client reads it from `leaseShare`; simpler here). */
  const farBelow = (d: { limits: readonly { remaining: number }[] }) =>
    d.limits.every((l, j) => 2 * l.remaining >= (m.limits[j]?.limit ?? 0)) ? m.limits : null;

  /**
   * Near a limit, where the object leases nothing ({@link NO_LEASE_BELOW_FREE} of a limit left, or a refusal), a
   * holder stands aside: a per-request decision through it would cost its round trip on top of the object's.
   */
  const nearLimit = (d: Decision) =>
    !d.allowed || d.limits.some((l, j) => l.remaining < NO_LEASE_BELOW_FREE * (m.limits[j]?.limit ?? 0));

  /** The object: one `take`, counted; the request's own unit used at its decision. */
  const home = (
    from: string,
    t: number,
    cost: number,
    ask: ReturnType<typeof leaseToAsk>,
    fromLog: boolean,
    settle: Settlement[],
  ) => {
    homeCalls++;
    for (const s of settle) returned += s.unused;
    const { decision, writes } = log.take(t, {
      cost,
      leaseUnits: ask.units,
      leaseMs: Math.floor(ask.lifetimeMs),
      leaseLeadMs: Math.min(Math.floor(ask.lifetimeMs), ask.leadMs),
      leaseFromLog: fromLog,
      settle,
    });
    rows += writes.length;
    if (decision.allowed && cost > 0) uses.push(t);
    if (decision.lease) leased += decision.lease.units;
    m.onHomeCall?.(t, from, cost, ask.units, decision.lease?.units ?? 0);
    return decision;
  };

  /** An isolate's reports of its leases straight from the object (`direct`) or from its holder. */
  /**
   * An isolate's settlements at the key's object, sub-leases included (an isolate asks the object itself while its
   * holder stands aside: what it spent from a sub-lease is settled there, re-dated by the holder's offset).
   */
  const settlements = (iso: Isolate, t: number): Settlement[] => {
    const out: Settlement[] = [];
    iso.leases = iso.leases.filter((l) => {
      const expired = t >= l.endsAt;
      const unused = expired ? l.left : 0;
      if (l.used > 0 || unused > 0) {
        const lastUseMs = l.offsetMs + l.lastUseMs;
        out.push({ recordedAt: l.recordedAt, issuedAt: l.issuedAt, used: l.used, lastUseMs, unused });
        l.used = 0;
        l.lastUseMs = 0;
      }
      return !expired;
    });
    return out;
  };
  const reports = (iso: Isolate, t: number): Report[] => {
    const out: Report[] = [];
    iso.leases = iso.leases.filter((l) => {
      if (!l.from) return true;
      const expired = t >= l.endsAt;
      const unused = expired ? l.left : 0;
      if (l.used > 0 || unused > 0) out.push({ lease: l, used: l.used, lastUseMs: l.lastUseMs, unused });
      l.used = 0;
      l.lastUseMs = 0;
      return !expired;
    });
    return out;
  };

  const isolateAsk = (iso: Isolate, t: number, rttMs: number) =>
    leaseToAsk(iso.counter, t, {
      lifetimeMs: m.lifetimeMs,
      maxUnits: m.maxUnits,
      youngMs,
      rttMs,
      farBelow: iso.farBelow,
    });

  /** A call from isolate `i` for `cost` (0: a refill), answered by `done` on the isolate's side. */
  const call = (i: number, iso: Isolate, t: number, cost: number, done: (a: Answer, at: number) => void) => {
    const direct = m.holders === "off" || t < iso.directUntil;
    const rtt = direct ? m.isolateHomeMs(i) : m.isolateHolderMs(i);
    const ask = isolateAsk(iso, t, rtt);
    if (cost === 0 && ask.units === 0) return false;
    const fromLog = sizedByObject(iso.counter);
    if (direct) {
      const settle = settlements(iso, t);
      const at = t + half(rtt);
      events.push(at, () => {
        const d = home(`i${i}`, at, cost, ask, fromLog, settle);
        const back = at + half(rtt);
        const lease: Lease | null = d.lease
          ? {
              from: null,
              holder: null,
              grantAt: at,
              offsetMs: 0,
              sentAt: t,
              issuedAt: at,
              recordedAt: d.lease.recordedAt,
              endsAt: t + d.lease.lifetimeMs,
              left: d.lease.units,
              used: 0,
              lastUseMs: 0,
            }
          : null;
        events.push(back, () => {
          iso.farBelow = farBelow(d);
          // With holders, an isolate sent here because the key is near a limit stays while the object leases nothing.
          const aside = m.holders !== "off" && (nearLimit(d) || d.lease === null);
          done({ allowed: d.allowed, lease, aside, farBelow: iso.farBelow, blockedUntil: d.blockedUntil }, back);
        });
      });
      return true;
    }
    holderCalls++;
    const told = reports(iso, t);
    const region = m.regionOf(i);
    const at = t + half(rtt);
    events.push(at, () => {
      serve(region, at, { cost, ask, fromLog, sentAt: t, reports: told }, (a, when) =>
        events.push(when + half(rtt), () => done(a, when + half(rtt))),
      );
    });
    return true;
  };

  /** The region's holder answers an isolate's ask at `at` (its answer leaves at the time passed to `reply`). */
  const serve = (
    region: number,
    at: number,
    msg: { cost: number; ask: ReturnType<typeof leaseToAsk>; fromLog: boolean; sentAt: number; reports: Report[] },
    reply: (a: Answer, when: number) => void,
  ) => {
    let h = holders.get(region);
    if (!h) {
      h = { counter: newCounter(at), leases: [], refilling: false, farBelow: null, servedAt: at };
      holders.set(region, h);
    }
    const holder = h;
    holder.servedAt = at;
    events.push(at + IDLE_GIVE_BACK_MS, () => {
      if (holders.get(region) === holder && holder.servedAt === at && holder.farBelow === null)
        giveBackAll(region, holder, at + IDLE_GIVE_BACK_MS);
    });
    for (const r of msg.reports) {
      const l = r.lease.from as HolderLease;
      if (r.lease.holder !== holder) {
        stranded += r.unused;
        continue;
      }
      l.outstanding -= r.used + r.unused;
      countUses(holder.counter, at, r.used);
      if (r.used > 0) {
        l.used += r.used;
        // The isolate asked before the holder granted: its uses lie at most `lastUseMs` after the grant.
        l.lastUseMs = Math.max(l.lastUseMs, r.lease.grantAt - l.sentAt + r.lastUseMs);
      }
      if (r.unused > 0) {
        if (at < l.endsAt) l.free += r.unused;
        else l.giveBack += r.unused;
      }
    }
    const sub = (l: HolderLease, g: number): Lease | null => {
      if (msg.ask.units === 0 || l.free === 0) return null;
      const endsAt = m.holders === "broken" ? msg.sentAt + msg.ask.lifetimeMs : msg.sentAt + (l.endsAt - g);
      if (endsAt - g < 4 * (at - msg.sentAt)) return null;
      // The holder keeps the rest for its region's other isolates: an isolate gets what it spends in a few seconds at
      // the rate its ask shows (asking again costs a regional round trip, in the background), at most half.
      const perMs = msg.ask.units / Math.max(1, msg.ask.lifetimeMs - msg.ask.leadMs);
      const wanted = msg.fromLog ? 1 : Math.ceil(perMs * SUB_SPEND_MS);
      const units = Math.min(Math.ceil(l.free / 2), wanted);
      l.free -= units;
      l.outstanding += units;
      const { recordedAt, issuedAt } = l;
      return {
        from: l,
        holder,
        grantAt: g,
        offsetMs: g - l.sentAt,
        sentAt: msg.sentAt,
        issuedAt,
        recordedAt,
        endsAt,
        left: units,
        used: 0,
        lastUseMs: 0,
      };
    };
    const live = holder.leases.find((l) => at < l.endsAt && l.free >= Math.max(1, msg.cost));
    if (live) {
      if (msg.cost > 0) {
        countRequest(holder.counter, at);
        live.free -= msg.cost;
        live.used += msg.cost;
        live.lastUseMs = Math.max(live.lastUseMs, at - live.sentAt);
        uses.push(at);
        spent += msg.cost;
      }
      reply({ allowed: true, lease: sub(live, at), aside: false, farBelow: holder.farBelow, blockedUntil: 0 }, at);
      refill(region, holder, at);
      return;
    }
    holderCall(region, holder, at, msg.cost, (d, l, back) => {
      const near = nearLimit(d);
      // With no lease to share (near a limit, or the object's share of headroom out in leases) the holder has nothing
      // to offer for a while: its isolates ask the object themselves, one round trip instead of two.
      const aside = near || d.lease === null;
      const answer = { allowed: d.allowed, aside, farBelow: holder.farBelow, blockedUntil: d.blockedUntil };
      reply({ ...answer, lease: l ? sub(l, back) : null }, back);
      if (near) giveBackAll(region, holder, back);
      else refill(region, holder, back);
    });
  };

  /** The holder asks for its next lease in the background when what it holds would run out within two round trips. */
  const refill = (region: number, holder: Holder, at: number) => {
    const live = holder.leases.filter((l) => at < l.endsAt);
    if (holder.refilling || live.length === 0 || holder.farBelow === null) return;
    const left = live.reduce((n, l) => n + l.free, 0);
    const until = Math.max(...live.map((l) => l.endsAt));
    if (!refillDue(holder.counter, at, { left, until }, m.holderHomeMs(region))) return;
    // A region too slow for a lease of its own rate renews nothing ahead of need: its next request asks.
    const ask = leaseToAsk(holder.counter, at, {
      lifetimeMs: m.lifetimeMs,
      maxUnits: m.maxUnits,
      youngMs,
      rttMs: m.holderHomeMs(region),
      farBelow: holder.farBelow,
    });
    if (ask.units === 0) return;
    holder.refilling = true;
    holderCall(region, holder, at, 0, () => {
      holder.refilling = false;
    });
  };

  /**
   * Near a limit the holder steps aside: its region's isolates ask the key's object themselves for a while, and it
   * gives back the units it holds unspent at once (one call), for them to find there.
   */
  const giveBackAll = (region: number, holder: Holder, at: number) => {
    const settle: Settlement[] = [];
    for (const l of holder.leases) {
      const unused = l.free + l.giveBack;
      if (unused === 0 && l.used === 0) continue;
      settle.push({ recordedAt: l.recordedAt, issuedAt: l.issuedAt, used: l.used, lastUseMs: l.lastUseMs, unused });
      l.free = 0;
      l.giveBack = 0;
      l.used = 0;
      l.lastUseMs = 0;
    }
    if (settle.length === 0) return;
    homeCalls++;
    const t = at + half(m.holderHomeMs(region));
    events.push(t, () => {
      for (const s of settle) {
        returned += s.unused;
        rows += log.settle(t, s).length;
      }
    });
  };

  /** The holder asks the key's object, exactly as an isolate does. */
  const holderCall = (
    region: number,
    holder: Holder,
    at: number,
    cost: number,
    done: (d: Decision, l: HolderLease | null, back: number) => void,
  ) => {
    const rtt = m.holderHomeMs(region);
    let ask = leaseToAsk(holder.counter, at, {
      lifetimeMs: m.lifetimeMs,
      maxUnits: m.maxUnits,
      youngMs,
      rttMs: rtt,
      farBelow: holder.farBelow,
    });
    if (ask.units === 0 || sizedByObject(holder.counter)) {
      // A region new to the key (or slow): a few units for the whole lifetime, asked outright. The object's own first
      // lease (`leaseFromLog`) is sized for an isolate seeing a share of the key and is none for a rare key.
      ask = { units: FIRST_LEASE_UNITS, lifetimeMs: m.lifetimeMs, leadMs: Math.ceil(rtt) };
    }
    const settle: Settlement[] = [];
    holder.leases = holder.leases.filter((l) => {
      const expired = at >= l.endsAt;
      const unused = l.giveBack + (expired ? l.free : 0);
      if (l.used > 0 || unused > 0) {
        settle.push({ recordedAt: l.recordedAt, issuedAt: l.issuedAt, used: l.used, lastUseMs: l.lastUseMs, unused });
        l.used = 0;
        l.lastUseMs = 0;
        l.giveBack = 0;
        if (expired) l.free = 0;
      }
      return !expired || l.outstanding > 0;
    });
    const t = at + half(rtt);
    events.push(t, () => {
      const d = home(`h${region}`, t, cost, ask, false, settle);
      const back = t + half(rtt);
      events.push(back, () => {
        const gone = holders.get(region) !== holder;
        let l: HolderLease | null = null;
        if (d.lease && gone) stranded += d.lease.units;
        else if (d.lease) {
          l = {
            sentAt: at,
            issuedAt: t,
            recordedAt: d.lease.recordedAt,
            endsAt: at + d.lease.lifetimeMs,
            free: d.lease.units,
            outstanding: 0,
            used: 0,
            lastUseMs: 0,
            giveBack: 0,
          };
          holder.leases.push(l);
        }
        if (!gone) holder.farBelow = farBelow(d);
        done(d, l, back);
      });
    });
  };

  const request = (n: number) => {
    const { at: t, isolate: i } = m.requests[n] as KeyRequest;
    let iso = isolates.get(i);
    if (!iso) {
      iso = { counter: newCounter(t), leases: [], refilling: false, directUntil: 0, farBelow: null, deniedUntil: 0 };
      isolates.set(i, iso);
    }
    const self = iso;
    countRequest(self.counter, t);
    // As the client does (settlement.ts, `settleIdle`): a key idle here for a second, not far below its limits, has
    // its leases settled by a call of its own — to the object, sub-leases included, so a burst elsewhere finds them.
    events.push(t + IDLE_RETURN_MS, () => {
      if (isolates.get(i) !== self || self.counter.seenAt !== t || self.farBelow !== null) return;
      const settle = settlements(self, t + IDLE_RETURN_MS);
      if (settle.length === 0) return;
      homeCalls++;
      const at = t + IDLE_RETURN_MS + half(m.isolateHomeMs(i));
      events.push(at, () => {
        for (const x of settle) {
          returned += x.unused;
          rows += log.settle(at, x).length;
        }
      });
    });
    const lease = self.leases.find((l) => l.left > 0 && t < l.endsAt);
    const take = (a: Answer, when: number) => {
      if (isolates.get(i) !== self) {
        if (a.lease) stranded += a.lease.left;
        return;
      }
      if (a.lease) self.leases.push(a.lease);
      if (a.aside) self.directUntil = when + ASIDE_MS;
      self.farBelow = a.farBelow;
      self.deniedUntil = Math.max(self.deniedUntil, a.allowed ? 0 : a.blockedUntil);
    };
    if (lease) {
      lease.left--;
      lease.used++;
      lease.lastUseMs = t - lease.sentAt;
      uses.push(t);
      spent++;
      granted[n] = true;
      addedMs[n] = 0;
      const live = self.leases.filter((l) => t < l.endsAt);
      const left = live.reduce((s, l) => s + l.left, 0);
      const until = Math.max(...live.map((l) => l.endsAt));
      const rtt = m.holders === "off" ? m.isolateHomeMs(i) : m.isolateHolderMs(i);
      if (!self.refilling && refillDue(self.counter, t, { left, until }, rtt)) {
        self.refilling = call(i, self, t, 0, (a, when) => {
          self.refilling = false;
          take(a, when);
        });
      }
      return;
    }
    // Refused from the deny cache: no call (the object said no unit frees before then).
    if (t < self.deniedUntil) return;
    call(i, self, t, 1, (a, when) => {
      granted[n] = a.allowed;
      addedMs[n] = when - t;
      take(a, when);
    });
  };

  m.requests.forEach((r, n) => {
    events.push(r.at, () => request(n));
  });
  for (const v of m.isolateChurn) {
    events.push(v.at, () => {
      const iso = isolates.get(v.index);
      if (iso) for (const l of iso.leases) stranded += l.left;
      isolates.delete(v.index);
    });
  }
  for (const v of m.holderChurn) {
    events.push(v.at, () => {
      const h = holders.get(v.index);
      if (h) for (const l of h.leases) stranded += l.free + l.giveBack;
      holders.delete(v.index);
    });
  }
  events.run();
  return { granted, addedMs, uses, homeCalls, holderCalls, leased, spent, returned, stranded, rows };
}
