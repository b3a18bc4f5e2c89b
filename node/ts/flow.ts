// The middleware's side of the request flow (the addon's `Flow`, the Rust flow rl-gateway
// and the Python middleware run): it only runs what each step asks, with the application's
// own Redis client. Every decision (plan, bans, costs, render, delay, settle, what to
// record) is the flow's; every call into the addon is synchronous.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import native from './load.js';
import type { FlowDebtWatch, FlowOutcome, Policy, RequestFlow } from './load.js';
import { Limiter, type Decision, type FleetOptions, type LeaseOptions, type LimiterOptions } from './limiter.js';
import type { RedisLike } from './client.js';

/** One plan item's units, as a step names them (`item` indexes the request's policies). */
export interface Take {
  item: number;
  key: string;
  units: number;
}

/** What the flow recorded for a request: refusals towards bans and top offenders. */
interface FlowRecord {
  tier: string;
  refusals: { policy: string; subject: string; strike: string[] | null }[];
  giveBack: Take[];
  delayed: string | null;
  bannedMs: number | null;
  unknownTier: string | null;
}

type Step =
  | { kind: 'tier'; apiKey: string }
  | { kind: 'book'; takes: Take[]; banReads: string[] }
  | { kind: 'peek'; takes: Take[] }
  | { kind: 'force'; takes: Take[] }
  | { kind: 'respond'; status: number; headers: [string, string][]; body: string; record: FlowRecord | null; settle: boolean };
// A `forward` step comes as the string 'forward'; its parts from `RequestFlow.forwardWords()`.

/** A tier lookup: an API key's tier name, or null for the default tier. */
export type TierResolver = (apiKey: string) => Promise<string | null | undefined> | string | null | undefined;

/** The configuration: the path of a TOML file (`rl-gateway --config`'s format), or an object of the same schema. */
export type RateLimitConfig = string | Record<string, unknown>;

export interface RateLimitOptions {
  /** The application's Redis client (ioredis, iovalkey, node-redis), or `limiter`. */
  client?: RedisLike;
  /** A `Limiter` of your own (its client does the I/O). */
  limiter?: Limiter;
  /** Options of the limiter built from `client`. */
  limiterOptions?: LimiterOptions;
  /** The TOML file's path or the same structure as an object; omitted: the design's defaults. */
  config?: RateLimitConfig;
  /** Route templates of the endpoint dimension besides the rules' paths (`rl-gateway --route`). */
  routes?: string[];
  /** Tiers: an object from API key to tier name, or a function; default: the Redis hash `tierHash`. */
  tiers?: Record<string, string> | TierResolver;
  /** The Redis hash of tiers (default `rl:tiers`), read with `HGET`, each answer kept `tierCacheMs`. */
  tierHash?: string;
  /** How long a tier read from the hash is kept, in ms (default 10000). */
  tierCacheMs?: number;
  /** Paths never limited (health checks). */
  excludePaths?: string[];
}

/** What the framework does with a request. */
export type Verdict =
  | { kind: 'respond'; status: number; headers: [string, string][]; body: string }
  | {
      kind: 'forward';
      headers: [string, string][];
      /** The path's normal form (what the application sees). */
      path: string;
      /** The request id and the trace (this hop as the parent) the application sees. */
      requestId: string;
      traceparent: string;
      /** Call after the response: settles the reservation from its headers (a cost header). */
      finish: ((responseHeaders: [string, string][]) => Promise<void>) | null;
    };

/** The request as a framework sees it. */
export interface HttpRequest {
  method: string;
  path: string;
  /** `[name, value]` pairs (or `rawHeaders`). */
  headers?: [string, string][];
  /** Name, value, name, value... as Node's `req.rawHeaders` (used instead of `headers`: cheaper). */
  rawHeaders?: string[];
  /** The client's address. */
  peer: string | null;
  /** The route template, when the framework knows it before the handler. */
  route?: string | null;
}

const REQUEST_ID = /^[A-Za-z0-9\-_.:]{1,128}$/;
// Refusal tasks in flight at most: past it a refusal is dropped, as rl-gateway's bounded queue does.
const MAX_IN_FLIGHT = 1000;

function nowMs(): number {
  return Math.floor(performance.now());
}

/** The flow of `config` (a path, an object, or nothing); a bad one throws naming the file, the line and the field. */
export function loadFlow(config: RateLimitConfig | undefined, routes: string[] = []): InstanceType<typeof native.Flow> {
  if (config === undefined) return native.Flow.fromJson('{}', '<defaults>', routes);
  if (typeof config === 'string') {
    let text: string;
    try {
      text = readFileSync(config, 'utf8');
    } catch (e) {
      throw new Error(`${config}: ${(e as Error).message}`);
    }
    return native.Flow.fromToml(text, config, routes);
  }
  return native.Flow.fromJson(JSON.stringify(config), '<object>', routes);
}

function outcome(d: Decision): FlowOutcome {
  return {
    allowed: d.allowed,
    retryAfterMs: d.retryAfterMs ?? undefined,
    remaining: d.remaining,
    resetAfterMs: d.resetAfterMs,
    shadow: d.shadow,
    source: d.source,
  };
}

/** `takes` as the limiter's items and units (each take's key with its plan item's policy). */
function items(takes: Take[], policies: Policy[]): [[string, Policy][], number[]] {
  return [takes.map((t) => [t.key, policies[t.item]] as [string, Policy]), takes.map((t) => t.units)];
}
const NO_BANS: (number | null)[] = [];
const NO_WORDS: string[] = [];

/** A word of `Flow.begin`'s or `Flow.feed`'s answer that is the same as the one at its place
 * in the last answer of its kind (a one-character string: JavaScript makes none). */
const SAME = '\u0001';

/** One at a time: held requests are booked in turn (look, then FORCE), so two never get the same slot. */
class Lock {
  private tail: Promise<void> = Promise.resolve();
  acquire(): Promise<() => void> {
    let release!: () => void;
    const next = new Promise<void>((r) => (release = r));
    const turn = this.tail.then(() => release);
    this.tail = next;
    return turn;
  }
}

/** Tiers in a Redis hash (`HSET rl:tiers <api key> pro`), each answer kept a while. */
function hashTiers(limiter: Limiter, hash: string, ttlMs: number): TierResolver {
  const cache = new Map<string, { tier: string | null; at: number }>();
  return async (apiKey) => {
    const hit = cache.get(apiKey);
    const now = nowMs();
    if (hit && now - hit.at < ttlMs) return hit.tier;
    try {
      const value = await limiter.query(['HGET', hash, apiKey], hash);
      const tier = value == null ? null : String(value);
      cache.delete(apiKey);
      cache.set(apiKey, { tier, at: now });
      // A bounded cache: the oldest answer goes first.
      if (cache.size > 100_000) cache.delete(cache.keys().next().value as string);
      return tier;
    } catch {
      return hit ? hit.tier : null;
    }
  };
}

/**
 * The flow's driver, shared by the Express, Fastify and Hono adapters: `decide` runs a
 * request through the flow and says what the framework does with it.
 */
export class FlowDriver {
  readonly limiter: Limiter;
  private readonly flow: InstanceType<typeof native.Flow>;
  private readonly tiers: TierResolver;
  private readonly exclude: Set<string>;
  private readonly booking = new Lock();
  private readonly prefix: string;
  private readonly counts = new Map<string, [string, string, number]>();
  private flushing: NodeJS.Timeout | null = null;
  /** The fleet heartbeat's timer (unref'd: it never keeps the process alive). */
  private heartbeats: NodeJS.Timeout | null = null;
  /** `close()` was called: no heartbeat starts again. */
  private closed = false;
  private inFlight = 0;
  /** The last booking command `Flow.begin` answered, and the last headers `Flow.feed`
   * answered (names, values): its answers name only what changed. */
  private lastCommand: string[] = NO_WORDS;
  private headerNames: string[] = NO_WORDS;
  private headerValues: string[] = NO_WORDS;
  /** Refusals not counted towards bans because too many were in flight. */
  dropped = 0;

  constructor(options: RateLimitOptions) {
    // The configuration first: a bad one fails the application's start, not its requests.
    this.flow = loadFlow(options.config, options.routes);
    const fleet = this.fleetOptions();
    const leases = this.leaseOptions();
    if (options.limiter) {
      this.limiter = options.limiter;
      if (fleet !== null && this.limiter.fleet === null) {
        process.emitWarning(
          '[fleet] membership is on but the limiter passed in has none (new Limiter(client, { fleet })): the local fallback divides by instances',
        );
      }
      if (leases !== null && this.limiter.leases === null) {
        process.emitWarning(
          'hot dimensions are configured but the limiter passed in has no leases (new Limiter(client, { leases })): every key is decided in Redis',
        );
      }
    } else if (options.client) {
      this.limiter = new Limiter(options.client, { ...options.limiterOptions, fleet: fleet ?? undefined, leases: leases ?? undefined });
    } else {
      throw new TypeError('redis-rl: the middleware needs `client` (your Redis client) or `limiter`');
    }
    const tiers = options.tiers;
    if (typeof tiers === 'function') this.tiers = tiers;
    else if (tiers) this.tiers = (k) => tiers[k] ?? null;
    else this.tiers = hashTiers(this.limiter, options.tierHash ?? 'rl:tiers', options.tierCacheMs ?? 10_000);
    this.exclude = new Set(options.excludePaths ?? []);
    this.prefix = this.flow.keyPrefix;
    this.flow.bind(this.limiter.core, this.limiter.cluster);
  }

  /** The limiter's membership as `[fleet]` configures it: the fleet key is
   * `<key_prefix>:{fleet}`, as rl-gateway's, so a fleet can mix them. */
  private fleetOptions(): FleetOptions | null {
    const fleet = this.flow.fleet;
    if (fleet === null) return null;
    const [heartbeatMs, ttlMs] = fleet;
    return { key: `${this.flow.keyPrefix}:{fleet}`, heartbeatMs, ttlMs, divides: !this.flow.instancesConfigured };
  }

  /** The limiter's leases as `hot` and `[leases]` configure them. */
  private leaseOptions(): LeaseOptions | null {
    const leases = this.flow.leases;
    if (leases === null) return null;
    const [lifetimeMs, demandMs, maxPercent] = leases;
    return { lifetimeMs, demandMs, maxPercent };
  }

  /** Renews the limiter's membership and gives back the leases that ended from a timer, off the requests' path: a few ticks per
   * heartbeat (the op sends nothing until one is due, and one at a time). Started by the
   * first request, as the Python middleware's task: by then the application's client is
   * connected (a node-redis client is not until `connect()`). */
  private beat(): void {
    const { fleet, leases } = this.limiter;
    if ((fleet === null && leases === null) || this.closed) return;
    const limiter = this.limiter;
    // A few ticks per heartbeat; at least two per lease lifetime, so a lease's unspent units
    // go back soon after it ends.
    const ticks: number[] = [];
    if (fleet !== null) ticks.push((fleet.heartbeatMs ?? 1000) / 4);
    if (leases !== null) ticks.push((leases.lifetimeMs ?? 250) / 2);
    void limiter.heartbeat();
    this.heartbeats = setInterval(() => void limiter.heartbeat(), Math.max(1, Math.floor(Math.min(...ticks))));
    this.heartbeats.unref();
  }

  /** Stops the heartbeat, leaves the fleet (the others stop counting this member at their
   * next heartbeat) and writes the pending top offenders; the client stays open (it is
   * the application's). */
  async close(): Promise<void> {
    this.closed = true;
    if (this.heartbeats !== null) {
      clearInterval(this.heartbeats);
      this.heartbeats = null;
      await this.limiter.leaveFleet();
      await this.limiter.releaseLeases();
    }
    if (this.counts.size > 0) await this.flush();
  }

  /** Requests waiting in the flow for their booking's reply (none once every request is answered). */
  get pendingRequests(): number {
    return this.flow.pendingRequests;
  }

  /** The effective plan in words (as `rl-gateway --check-config`). */
  explain(): string {
    return this.flow.explain();
  }

  /** Runs `req` through the flow: respond (refused) or forward (after any hold), or null (excluded). */
  async decide(req: HttpRequest): Promise<Verdict | null> {
    if (this.exclude.has(req.path)) return null;
    if (this.heartbeats === null) this.beat();
    const raw = req.rawHeaders ?? (req.headers ?? []).flat();
    let given: string | undefined;
    for (let i = 0; i + 1 < raw.length; i += 2) {
      if (raw[i].length === 12 && raw[i].toLowerCase() === 'x-request-id') {
        given = raw[i + 1];
        break;
      }
    }
    const rid = given !== undefined && REQUEST_ID.test(given) ? given : randomUUID();
    // One string across the addon (a header holds no line feed). The usual request: planned
    // and its booking started in one call, waiting in the flow under a number (no object).
    const begun = this.flow.begin(req.method, req.path, raw.join('\n'), req.peer, rid, req.route ?? null, nowMs());
    const nl = begun.indexOf('\n');
    let request: RequestFlow;
    let step: Step | 'forward';
    if (nl !== -1) {
      const id = Number(begun.slice(0, nl));
      const fed = await this.bookBegun(id, begun.slice(nl + 1), rid);
      // Forwarded as it is (no hold, settlement or record): the flow has forgotten it.
      if (fed !== null) return fed;
      request = this.flow.request(id);
      step = request.step as Step | 'forward';
    } else {
      // Step by step: a tier to look up, a refusal before any booking, or a booking the
      // limiter's checkAll makes (shadow items, keys across cluster slots).
      request = this.flow.request(Number(begun));
      step = (request.kind === 'book' ? await this.book(request, null) : request.step) as Step | 'forward';
    }
    // Each plan item's policy, built only when a step other than the booking needs it.
    let policies: Policy[] | null = null;
    const policiesOf = (): Policy[] => (policies ??= request.policies());
    let release: (() => void) | null = null;
    try {
      for (;;) {
        if (step === 'forward') {
          break;
        } else if (step.kind === 'tier') {
          step = request.tier((await this.tiers(step.apiKey)) ?? null) as Step;
        } else if (step.kind === 'book') {
          step = (await this.book(request, step, policiesOf)) as Step;
        } else if (step.kind === 'peek') {
          release = await this.booking.acquire();
          step = request.peeked(await this.peek(step.takes, policiesOf())) as Step;
        } else if (step.kind === 'force') {
          const ok = await this.force(step.takes, policiesOf());
          release?.();
          release = null;
          step = request.forced(ok) as Step;
        } else {
          break;
        }
      }
    } finally {
      release?.();
    }
    if (step !== 'forward') {
      if (step.record !== null) this.record(step.record, policiesOf());
      return { kind: 'respond', status: step.status, headers: step.headers, body: step.body };
    }
    // [path, 'holdMs\nsettle\nrecord\ntraceparent\nname\nvalue...']
    const [path, rest] = request.forwardWords();
    const words = rest.split('\n');
    if (words[2] === '1') this.record(request.forwardRecord() as FlowRecord, policiesOf());
    if (words[0] !== '') {
      // delay_max_ms: booked for its slot with FORCE, held, then served.
      try {
        await new Promise((r) => setTimeout(r, Number(words[0])));
      } finally {
        request.release();
      }
    }
    const headers: [string, string][] = [];
    for (let i = 4; i + 1 < words.length; i += 2) headers.push([words[i], words[i + 1]]);
    headers.push(['x-request-id', rid]);
    const finish = words[1] === '1' ? (response: [string, string][]) => this.settle(request, response, policiesOf()) : null;
    return { kind: 'forward', headers, path, requestId: rid, traceparent: words[3], finish };
  }

  /** The booking `Flow.begin` started for request `id` (`words`: the key routing it, the
   * count of ban keys, the ban keys, the command's words), its ban reads along (one round
   * trip of latency); the verdict when the flow forwards the request as it is, else null
   * (it goes on step by step). */
  private async bookBegun(id: number, text: string, rid: string): Promise<Verdict | null> {
    try {
      const words = text.split('\n');
      const key = words[0];
      const banCount = Number(words[1]);
      let command = NO_WORDS;
      if (words.length > 2 + banCount) {
        // Read before any await: the next answer names what changed from this one.
        command = words.slice(2 + banCount);
        const last = this.lastCommand;
        for (let i = 0; i < command.length; i++) if (command[i] === SAME) command[i] = last[i];
        this.lastCommand = command;
      }
      const fail = (message: string, outage: boolean) => this.flow.fail(id, message, outage);
      let reply: unknown;
      let bans: (number | null)[] = NO_BANS;
      if (banCount === 0) {
        try {
          reply = await this.limiter.sendFirst(command, key);
        } catch (e) {
          reply = await this.limiter.exchangeAfter(e, key, fail);
        }
      } else {
        const reads = words.slice(2, 2 + banCount).map((k) => this.pttl(k));
        [reply, bans] = await Promise.all([this.limiter.exchange(command, key, fail), Promise.all(reads)]);
      }
      let fed = this.flow.feed(id, reply, bans, nowMs());
      // A hot key's lease was taken: the booking's next command (the `RL.ALL` of the others).
      while (fed.charCodeAt(0) === 83 /* S */) {
        reply = await this.limiter.exchange(fed.slice(2).split('\n'), key, fail);
        fed = this.flow.feed(id, reply, bans, nowMs());
      }
      const kind = fed.charCodeAt(0);
      // Read at once, as `begin`'s words: the next answer names what changed from this one.
      return kind === 70 /* F */ || kind === 102 /* f */ ? this.forwarded(fed, rid) : null;
    } catch (e) {
      // The client's own error (not a Redis outage): nothing more is fed.
      this.flow.forget(id);
      throw e;
    }
  }

  /** The verdict of `Flow.feed`'s `F` answer (`F`, traceparent, count of header words, the
   * headers' names and values, then the path: the rest, the only part that may hold a line
   * feed) or `f` answer (`f`, traceparent, the values of the last answer's headers, `SAME`
   * where a value did not change, then the path). */
  private forwarded(fed: string, rid: string): Verdict {
    const words = fed.split('\n');
    const headers: [string, string][] = [];
    let end: number;
    if (words[0] === 'F') {
      end = 3 + Number(words[2]);
      const names: string[] = [];
      const values: string[] = [];
      for (let i = 3; i < end; i += 2) {
        names.push(words[i]);
        values.push(words[i + 1]);
        headers.push([words[i], words[i + 1]]);
      }
      this.headerNames = names;
      this.headerValues = values;
    } else {
      const names = this.headerNames;
      const values = this.headerValues;
      end = 2 + names.length;
      for (let i = 0; i < names.length; i++) {
        const v = words[2 + i];
        if (v !== SAME) values[i] = v;
        headers.push([names[i], values[i]]);
      }
    }
    headers.push(['x-request-id', rid]);
    const path = words.length === end + 1 ? words[end] : words.slice(end).join('\n');
    return { kind: 'forward', headers, path, requestId: rid, traceparent: words[1], finish: null };
  }

  /** The limiter call and the ban reads, concurrently (one round trip of latency); the
   * next step. The usual call is the flow's own op (only the command and the reply cross);
   * shadow items and keys across cluster slots take the limiter's `checkAll` (`step`: the
   * book step, read from the request when not given). */
  private async book(request: RequestFlow, step: Extract<Step, { kind: 'book' }> | null, policiesOf?: () => Policy[]): Promise<unknown> {
    const command = request.bookStart(this.limiter.core, this.limiter.cluster);
    if (command !== null) {
      const first = command === '' ? [] : command.split('\n');
      const key = request.bookingKey;
      const fail = (message: string, outage: boolean) => request.bookFail(message, outage);
      const banReads = step === null ? request.banReads : step.banReads;
      let reply: unknown;
      let bans: (number | null)[] = NO_BANS;
      if (banReads.length === 0) reply = await this.limiter.exchange(first, key, fail);
      else [reply, bans] = await Promise.all([this.limiter.exchange(first, key, fail), Promise.all(banReads.map((k) => this.pttl(k)))]);
      let next = request.bookFeed(reply, bans, nowMs()) as { kind?: string; command?: string };
      // A hot key's lease was taken first: the booking's next command (the `RL.ALL` of the others).
      while (next.kind === 'send') {
        reply = await this.limiter.exchange((next.command as string).split('\n'), key, fail);
        next = request.bookFeed(reply, bans, nowMs()) as { kind?: string; command?: string };
      }
      return next;
    }
    const book = step ?? (request.step as Extract<Step, { kind: 'book' }>);
    const policies = policiesOf ? policiesOf() : request.policies();
    const [md, bans] = await Promise.all([
      this.limiter.checkAll(...items(book.takes, policies)),
      Promise.all(book.banReads.map((k) => this.pttl(k))),
    ]);
    return request.booked(md.decisions.map(outcome), md.deniedIndex, bans, nowMs());
  }

  /** A ban key's time left (`PTTL`); null when the read failed: no ban, the limits still apply. */
  private async pttl(key: string): Promise<number | null> {
    try {
      return Number(await this.limiter.query(['PTTL', key], key));
    } catch {
      return null;
    }
  }

  /** A held request's look at its takes: one `RL.ALL ... COSTS ... PEEK` per hash slot (the
   * client's `each` op, as rl-gateway, the tower middleware and the ASGI middleware), from
   * Redis itself; null when Redis did not answer (no slot to book: refused as before). */
  private async peek(takes: Take[], policies: Policy[]): Promise<FlowOutcome[] | null> {
    try {
      return (await this.limiter.peekAllUnits(...items(takes, policies))).map(outcome);
    } catch {
      return null;
    }
  }

  /** A held request's booking: its takes' units even over the limits, one `RL.ALL ... COSTS
   * ... FORCE` per hash slot (as the Rust front ends and Python); false when Redis did not
   * answer (refused as before). */
  private async force(takes: Take[], policies: Policy[]): Promise<boolean> {
    try {
      await this.limiter.forceAllUnits(...items(takes, policies));
      return true;
    } catch {
      return false;
    }
  }

  /** Refunds or charges each item the difference the response's headers report; a charge
   * on a window that forgets debts at its boundary (fixed window, calendar quota) holds the
   * subject while the debt is owed. */
  private async settle(request: RequestFlow, response: [string, string][], policies: Policy[]): Promise<void> {
    let charged = false;
    for (const a of request.adjust(response)) {
      try {
        if (a.kind === 'refund') await this.limiter.refund(a.key, policies[a.item], a.units);
        else {
          await this.limiter.settle(a.key, policies[a.item], 0, a.units);
          charged = true;
        }
      } catch {
        // the reservation stands
      }
    }
    if (charged) await Promise.all(request.debtWatches(response).map((w) => this.holdDebt(w)));
  }

  /** After a charge on `watch.key`: when its window is over its limit now, the subject's
   * hold (the flow's command, in its ban key), so the ban check refuses it until paid. */
  private async holdDebt(watch: FlowDebtWatch): Promise<void> {
    try {
      const command = watch.hold(await this.limiter.state(watch.key));
      // EVAL script numkeys key...: the ban key routes it.
      if (command !== null) await this.limiter.query(command, command[3] ?? watch.key);
    } catch {
      // the charge stands; the hold was not written
    }
  }

  /** What a request leaves behind, off its path: strikes towards bans, top offenders, units to give back. */
  private record(record: FlowRecord, policies: Policy[]): void {
    for (const r of record.refusals) {
      if (r.strike !== null) this.spawn(() => this.strike(r.policy, r.subject, r.strike as string[]));
      const id = `${r.policy}\n${r.subject}`;
      const c = this.counts.get(id);
      if (c) c[2] += 1;
      else this.counts.set(id, [r.policy, r.subject, 1]);
    }
    if (this.counts.size > 0 && this.flushing === null) {
      this.flushing = setTimeout(() => void this.flush(), 1000);
      this.flushing.unref();
    }
    if (record.giveBack.length > 0) {
      const takes = record.giveBack;
      this.spawn(async () => {
        for (const t of takes) await this.limiter.refund(t.key, policies[t.item], t.units).catch(() => undefined);
      });
    }
  }

  private spawn(task: () => Promise<void>): void {
    if (this.inFlight >= MAX_IN_FLIGHT) {
      this.dropped += 1;
      return;
    }
    this.inFlight += 1;
    task()
      .catch(() => undefined)
      .finally(() => (this.inFlight -= 1));
  }

  private async strike(policy: string, subject: string, strike: string[]): Promise<void> {
    // EVAL script numkeys key...: the first key routes it.
    const reply = (await this.limiter.query(strike, strike[3] ?? subject)) as unknown[];
    const command = native.banIndexCommand(this.prefix, policy, subject, reply.map(Number));
    if (command !== null) await this.limiter.query(command, command[3] ?? this.prefix);
  }

  /** Writes the summed refusals into the current minute's top-offender sets (once a second). */
  async flush(): Promise<void> {
    if (this.flushing !== null) clearTimeout(this.flushing);
    this.flushing = null;
    const counts = [...this.counts.values()];
    this.counts.clear();
    const byPolicy = new Map<string, [string, number][]>();
    for (const [policy, subject, n] of counts) {
      const list = byPolicy.get(policy) ?? [];
      list.push([subject, n]);
      byPolicy.set(policy, list);
    }
    const minute = Math.floor(Date.now() / 60_000);
    for (const [policy, entries] of byPolicy) {
      for (let i = 0; i < entries.length; i += 256) {
        const command = native.topAddCommand(this.prefix, policy, minute, entries.slice(i, i + 256));
        await this.limiter.query(command, command[3] ?? this.prefix).catch(() => undefined);
      }
    }
  }
}
