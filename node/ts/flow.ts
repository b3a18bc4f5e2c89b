// The middleware's side of the request flow (the addon's `Flow`, the Rust flow rl-gateway
// and the Python middleware run): it only runs what each step asks, with the application's
// own Redis client. Every decision (plan, bans, costs, render, delay, settle, what to
// record) is the flow's; every call into the addon is synchronous.
import { readFileSync } from 'node:fs';
import native from './load.js';
import type { FlowDebtWatch, FlowOutcome, Policy, RequestFlow } from './load.js';
import { Limiter, type Decision, type FleetOptions, type LeaseOptions, type LimiterOptions } from './limiter.js';
import type { RedisLike } from './client.js';
import { ReplySlots } from './replies.js';
import { AnswerReader } from './answers.js';

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
      finish: Finish | null;
    };

/** Settles a forwarded request's reservation from its response's headers (a cost header). */
export type Finish = (responseHeaders: [string, string][]) => Promise<void>;

/**
 * What a framework does with a request, as `FlowDriver.run` calls it back (once per
 * request, one of the four). `C`: the framework's own context of the request.
 */
export interface VerdictTarget<C> {
  /** Serve it: set the headers `names[i]: values[i]` and `x-request-id: requestId` (the
   * arrays are the driver's: read them before returning), show the application the
   * request id, the trace (`traceparent`: this hop as the parent) and the path's normal
   * form, and call `finish` (when not null) with the response's headers once it is sent. */
  forward(ctx: C, names: readonly string[], values: readonly string[], requestId: string, traceparent: string, path: string, finish: Finish | null): void;
  /** Answer it here (refused): `status`, `headers`, `body`. */
  respond(ctx: C, status: number, headers: [string, string][], body: string): void;
  /** Not limited (an excluded path). */
  pass(ctx: C): void;
  /** The flow failed (the client's own error, not a Redis outage: that is the failure mode's). */
  fail(ctx: C, error: unknown): void;
}

/** A verdict inside the driver: a forward's headers as names and values (as `VerdictTarget.forward` takes them). */
type Outcome =
  | { kind: 'respond'; status: number; headers: [string, string][]; body: string }
  | { kind: 'forward'; names: string[]; values: string[]; path: string; requestId: string; traceparent: string; finish: Finish | null };

/** `words` from `from` on with each line feed made a space (no HTTP field holds one). */
function oneLine(words: string[], from = 0): string[] {
  for (let i = from; i < words.length; i++) if (words[i].includes('\n')) words[i] = words[i].replaceAll('\n', ' ');
  return words;
}

/** `target.fail`, whatever it throws in turn (nothing else is left to tell it). */
function failQuietly<C>(target: VerdictTarget<C>, ctx: C, error: unknown): void {
  try {
    target.fail(ctx, error);
  } catch {
    // nothing else is left to tell
  }
}

/** A request on its way through `run`: begun with the others that came in its turn of the
 * event loop, then (the usual booking) its reply fed with the others that came with it. One
 * object from the request's arrival to its verdict. */
class InFlight {
  /** Its number in the flow, its id, the key routing its booking (`begin`'s answer). */
  id = 0;
  rid = '';
  key = '';
  /** The usual booking's reply, waiting to be fed. */
  reply: unknown = undefined;

  constructor(
    readonly req: HttpRequest,
    readonly ctx: unknown,
    readonly target: VerdictTarget<unknown>,
  ) {}
}

/** `decide`'s target: the verdict as a promise. */
const PROMISED: VerdictTarget<{ resolve: (v: Verdict | null) => void; reject: (e: unknown) => void }> = {
  forward(ctx, names, values, requestId, traceparent, path, finish) {
    const headers: [string, string][] = names.map((n, i) => [n, values[i]]);
    headers.push(['x-request-id', requestId]);
    ctx.resolve({ kind: 'forward', headers, path, requestId, traceparent, finish });
  },
  respond(ctx, status, headers, body) {
    ctx.resolve({ kind: 'respond', status, headers, body });
  },
  pass(ctx) {
    ctx.resolve(null);
  },
  fail(ctx, error) {
    ctx.reject(error);
  },
};

/** The request as a framework sees it. */
export interface HttpRequest {
  method: string;
  path: string;
  /** `[name, value]` pairs (or `rawHeaders`). */
  headers?: [string, string][];
  /** Name, value, name, value... Node's `req.rawHeaders` (used instead of `headers`: cheaper;
   * taken as Node's parser hands them over, without a line feed, like the other fields then). */
  rawHeaders?: string[];
  /** The client's address. */
  peer: string | null;
  /** The route template, when the framework knows it before the handler. */
  route?: string | null;
}

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
  /** The reader of a batch's answers (each batch read at once, none nested in another). */
  private readonly answers = new AnswerReader();
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
  decide(req: HttpRequest): Promise<Verdict | null> {
    return new Promise((resolve, reject) => this.run(req, { resolve, reject }, PROMISED));
  }

  /**
   * Runs `req` through the flow and has `target` do what the framework does with it, for
   * `ctx` (the framework's own request: Express's request, response and next). `decide`
   * with a callback: the usual request (booked by the flow itself, then forwarded as it
   * is) makes no promise, async frame or verdict object of its own. The request is begun
   * with the others of its turn of the event loop (`beginArrived`), and its reply fed
   * with the others of its read (`feedReplies`).
   */
  run<C>(req: HttpRequest, ctx: C, target: VerdictTarget<C>): void {
    if (this.exclude.has(req.path)) return target.pass(ctx);
    if (this.arrived.length === 0) setImmediate(this.beginArrived);
    this.arrived.push(new InFlight(req, ctx, target as VerdictTarget<unknown>));
  }

  /** The requests that came in this turn of the event loop, begun together once it has
   * read every socket (one crossing into the addon for all of them, its code warm in the
   * CPU's caches after the first): a few microseconds later than at once, the time the
   * others take to arrive. */
  private arrived: InFlight[] = [];

  private readonly beginArrived = (): void => {
    const batch = this.arrived;
    this.arrived = [];
    let answers: string;
    try {
      if (this.heartbeats === null) this.beat();
      // One string across the addon, words joined by line feeds: a line feed in a word
      // would shift every word after it, the other requests' too. Node's HTTP parser lets
      // none through (a request line or header line ends there): `rawHeaders` and the path
      // of Express and Fastify hold none; what an adapter of its own hands over is checked.
      const words: string[] = [];
      for (const { req } of batch) {
        const raw = req.rawHeaders ?? oneLine((req.headers ?? []).flat());
        // The request id: chosen by the addon (its X-Request-Id when sane, else a new one).
        words.push(req.method, req.path, req.peer ?? '', '', req.route ?? '');
        if (req.rawHeaders === undefined) oneLine(words, words.length - 5);
        words.push(String(raw.length));
        for (let i = 0; i < raw.length; i++) words.push(raw[i]);
      }
      answers = this.flow.beginMany(words.join('\n'), nowMs());
    } catch (e) {
      for (const { ctx, target } of batch) failQuietly(target, ctx, e);
      return;
    }
    // The batch's bookings written to Redis at once (one system call, and one read for
    // the server, instead of one per request), when the client lets its socket be corked.
    const uncork = batch.length > 1 ? this.limiter.cork() : null;
    const answer = this.answers.batch(answers);
    for (const r of batch) {
      try {
        answer.next();
        if (answer.peek() === 69 /* E */) {
          answer.kind();
          r.target.fail(r.ctx, new Error(answer.rest()));
        } else {
          this.begun(answer, r);
        }
      } catch (e) {
        failQuietly(r.target, r.ctx, e);
      }
    }
    uncork?.();
  };

  /** Goes on with a request after `begin`'s answer (`answer`, read here): the usual
   * booking sent, its reply fed with the others that come with it; else step by step. */
  private begun(answer: AnswerReader, r: InFlight): void {
    const { ctx, target } = r;
    const id = (r.id = answer.number());
    const rid = (r.rid = answer.word());
    // Step by step: a tier to look up, a refusal before any booking, or a booking the
    // limiter's checkAll makes (shadow items, keys across cluster slots).
    if (!answer.more()) return this.deliver(this.stepwise(this.flow.request(id), rid, true), ctx, target);
    // The number, the id, the key routing the booking, the count of ban keys, the ban
    // keys, the command.
    const key = (r.key = answer.word());
    const banCount = answer.number();
    const banKeys = banCount === 0 ? NO_WORDS : [];
    for (let i = 0; i < banCount; i++) banKeys.push(answer.word());
    let command = NO_WORDS;
    if (answer.more()) {
      // Read before any await: the next answer names what changed from this one.
      command = [];
      const last = this.lastCommand;
      for (let i = 0; answer.more(); i++) command.push(answer.wordOr(last[i]));
      this.lastCommand = command;
    }
    if (banCount > 0 || command.length === 0) {
      return this.deliver(this.bookBegun(id, key, command, banKeys, rid), ctx, target);
    }
    this.limiter.sendThen(
      command,
      key,
      (reply) => this.queueReply(r, reply),
      (error) => this.deliver(this.afterFeed(id, key, null, this.failed(id, key, error), NO_BANS, rid), ctx, target),
    );
  }

  /** The usual bookings' replies waiting to be fed together: one read of the client's
   * socket resolves several calls in one run of microtasks, and the first of them queues
   * the feeding behind the others (one crossing into the addon for all of them, its code
   * warm in the CPU's caches after the first). */
  private replies: InFlight[] = [];

  /** The queued replies as `Flow.feedMany` reads them (kept from batch to batch). */
  private readonly replySlots = new ReplySlots();

  private queueReply(r: InFlight, reply: unknown): void {
    if (this.replies.length === 0) queueMicrotask(this.feedReplies);
    r.reply = reply;
    this.replies.push(r);
  }

  /** Feeds the queued replies in one call, then has each request's target do what its answer says. */
  private readonly feedReplies = (): void => {
    const batch = this.replies;
    this.replies = [];
    let answers: string;
    const slots = this.replySlots;
    try {
      slots.clear();
      for (const r of batch) slots.write(r.id, r.reply);
      answers = this.flow.feedMany(slots.slots, slots.used, slots.others, nowMs());
    } catch (e) {
      // A reply the addon could not read: those requests fail as the client's own error would.
      for (const r of batch) {
        this.flow.forget(r.id);
        failQuietly(r.target, r.ctx, e);
      }
      return;
    }
    const answer = this.answers.batch(answers);
    for (const { id, key, rid, ctx, target } of batch) {
      try {
        answer.next();
        const kind = answer.peek();
        if (kind === 70 /* F */ || kind === 102 /* f */) {
          // Read at once, as `begin`'s words: the next answer names what changed from this one.
          const traceparent = this.readFed(answer);
          target.forward(ctx, this.headerNames, this.headerValues, rid, traceparent, answer.rest(), null);
        } else if (kind === 69 /* E */) {
          answer.kind();
          target.fail(ctx, new Error(answer.rest()));
        } else {
          this.deliver(this.afterFeed(id, key, answer.rest(), null, NO_BANS, rid), ctx, target);
        }
      } catch (e) {
        // The framework's own failure (headers sent already...): the others still get theirs.
        failQuietly(target, ctx, e);
      }
    }
  };

  /** Has `target` do what `outcome` says, once it comes. */
  private deliver<C>(outcome: Promise<Outcome | null>, ctx: C, target: VerdictTarget<C>): void {
    outcome.then(
      (o) => {
        try {
          if (o === null) target.pass(ctx);
          else if (o.kind === 'respond') target.respond(ctx, o.status, o.headers, o.body);
          else target.forward(ctx, o.names, o.values, o.requestId, o.traceparent, o.path, o.finish);
        } catch (e) {
          // The framework's own failure (headers sent already...): not an unhandled rejection.
          failQuietly(target, ctx, e);
        }
      },
      (e: unknown) => failQuietly(target, ctx, e),
    );
  }

  /** The booking `Flow.begin` started for request `id` (`command`: its words), its ban
   * reads along (one round trip of latency), then on as `afterFeed`. */
  private async bookBegun(id: number, key: string, command: string[], banKeys: string[], rid: string): Promise<Outcome | null> {
    let reply: unknown;
    let bans: (number | null)[] = NO_BANS;
    try {
      const fail = (message: string, outage: boolean) => this.flow.fail(id, message, outage);
      const reads = Promise.all(banKeys.map((k) => this.pttl(k)));
      [reply, bans] = await Promise.all([this.limiter.exchange(command, key, fail), reads]);
    } catch (e) {
      // The client's own error (not a Redis outage): nothing more is fed.
      this.flow.forget(id);
      throw e;
    }
    return this.afterFeed(id, key, null, reply, bans, rid);
  }

  /** The reply of the command `fail` gives after the usual booking's `error` (the twin, or
   * a decision without Redis: undefined). */
  private async failed(id: number, key: string, error: unknown): Promise<unknown> {
    try {
      return await this.limiter.exchangeAfter(error, key, (message, outage) => this.flow.fail(id, message, outage));
    } catch (e) {
      this.flow.forget(id);
      throw e;
    }
  }

  /** After the booking's reply (`reply`, fed here unless `fed` is its answer already): the
   * booking's next commands (a hot key's lease was taken first: the `RL.ALL` of the
   * others), then the headers when the flow forwards the request as it is, else on step
   * by step. */
  private async afterFeed(id: number, key: string, fed: string | null, reply: unknown, bans: (number | null)[], rid: string): Promise<Outcome | null> {
    try {
      const fail = (message: string, outage: boolean) => this.flow.fail(id, message, outage);
      if (fed === null) fed = this.flow.feed(id, await reply, bans, nowMs());
      while (fed.charCodeAt(0) === 83 /* S */) {
        const next = await this.limiter.exchange(fed.slice(2).split('\n'), key, fail);
        fed = this.flow.feed(id, next, bans, nowMs());
      }
      const kind = fed.charCodeAt(0);
      if (kind === 70 /* F */ || kind === 102 /* f */) {
        // Read at once: the next answer names what changed from this one.
        // A reader of its own: the batches' reader may be amid a batch.
        const answer = new AnswerReader().one(fed);
        const traceparent = this.readFed(answer);
        const path = answer.rest();
        return { kind: 'forward', names: this.headerNames.slice(), values: this.headerValues.slice(), path, requestId: rid, traceparent, finish: null };
      }
    } catch (e) {
      // The client's own error (not a Redis outage): nothing more is fed.
      this.flow.forget(id);
      throw e;
    }
    return this.stepwise(this.flow.request(id), rid, false);
  }

  /** The request's steps after its booking or instead of it (a tier to look up, a
   * refusal, a hold, a settlement, a record), with the request out of the flow as an
   * object; `book`: its first step is a booking the limiter's checkAll may make. */
  private async stepwise(request: RequestFlow, rid: string, book: boolean): Promise<Outcome> {
    let step = (book && request.kind === 'book' ? await this.book(request, null) : request.step) as Step | 'forward';
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
    const names: string[] = [];
    const values: string[] = [];
    for (let i = 4; i + 1 < words.length; i += 2) {
      names.push(words[i]);
      values.push(words[i + 1]);
    }
    const finish = words[1] === '1' ? (response: [string, string][]) => this.settle(request, response, policiesOf()) : null;
    return { kind: 'forward', names, values, path, requestId: rid, traceparent: words[3], finish };
  }

  /** Reads the headers of `Flow.feed`'s `F` answer (`F`, traceparent, count of header
   * words, the headers' names and values, then the path: the rest, the only part that may
   * hold a line feed) or `f` answer (`f`, traceparent, the values of the last answer's
   * headers, `SAME` where a value did not change, then the path) into `headerNames` and
   * `headerValues`; the traceparent (`answer` left at the path). */
  private readFed(answer: AnswerReader): string {
    const full = answer.kind() === 70; /* F */
    const traceparent = answer.word();
    if (full) {
      const count = answer.number();
      const names: string[] = [];
      const values: string[] = [];
      for (let i = 0; i < count; i += 2) {
        names.push(answer.word());
        values.push(answer.word());
      }
      this.headerNames = names;
      this.headerValues = values;
    } else {
      const values = this.headerValues;
      for (let i = 0; i < values.length; i++) values[i] = answer.wordOr(values[i]);
    }
    return traceparent;
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
