// The limiter: Python's names (check, peek, checkAll, takeUpto, peekUpto, refund, settle),
// each call an op of the addon driven over the application's own client. Nothing here
// decides: the op says what to send and what the answers mean.
import native from './load.js';
import type { AcrossSlots, JsDecision, JsGrant, JsMultiDecision, JsSettled, Op, Policy, Query } from './load.js';
import { isReplyError, messageOf, senderFor, type RedisLike, type Sender } from './client.js';
import { Deadlines, TimeoutError } from './deadline.js';

/** The answer for one key. */
export type Decision = JsDecision;
/** The answer for several keys checked together (all or nothing). */
export type MultiDecision = JsMultiDecision;
/** The answer to `takeUpto`. */
export type Grant = JsGrant;

/** What `settle` did: `exact` (nothing sent), `refunded` (`units` given back) or `charged`
 * (`units` taken with FORCE; `decision` shows the limiter afterwards). */
export type Settled = JsSettled;

export interface LimiterOptions {
  /** `auto` (the module where loaded, else the Lua twin), `module` or `lua`. */
  engine?: 'auto' | 'module' | 'lua';
  /** Per Redis call, in ms (default 50); a call that takes longer is an outage (failure mode). 0: none. */
  timeoutMs?: number;
  /** Keys the deny cache remembers (default 10000; 0: off). */
  denyCache?: number;
  /** Failures in a row that open the circuit breaker (default 5). */
  breakerFailures?: number;
  /** How long the breaker stays open, in ms (default 1000). */
  breakerOpenMs?: number;
  /** Keys the local fallback holds at most (default 100000). */
  localCapacity?: number;
  /** Fleet membership (none by default): run `heartbeat()` from a timer. */
  fleet?: FleetOptions;
  /** Leases for `checkAll` keys whose policy is hot (none by default): run `heartbeat()`
   * from a timer, at least twice per `lifetimeMs`, so unspent units go back. */
  leases?: LeaseOptions;
}

/**
 * Leases (as rl-gateway's `[leases]`): a `checkAll` key whose policy is hot is served from a
 * batch of units taken ahead (`COST n UPTO`) and spent locally; what is unspent when the
 * lease ends goes back (`RL.REFUND`, from `heartbeat()`).
 */
export interface LeaseOptions {
  /** How long a lease lives, in ms (default 250). */
  lifetimeMs?: number;
  /** How much of the recent demand a lease covers, in ms (default 200). */
  demandMs?: number;
  /** What the fleet's leases of one key hold together, in percent of the limit (default 10). */
  maxPercent?: number;
}

/**
 * Fleet membership: each limiter holds an `RL.CONCURRENCY` lease in `key` under its own id,
 * renewed by `heartbeat()`, and reads the live fleet size from the reply; with `divides`
 * (default true) the local fallback divides each limit by it once known (as rl-gateway's
 * `[fleet]`), instead of the policy's `instances`.
 */
export interface FleetOptions {
  /** The fleet's key (the middleware's: `<key_prefix>:{fleet}`, as rl-gateway's). */
  key: string;
  /** Time between renewals, in ms (default 1000). */
  heartbeatMs?: number;
  /** How long a silent member is still counted, in ms (default 3000; more than `heartbeatMs`). */
  ttlMs?: number;
  /** The local fallback divides each limit by the live fleet size (default true). */
  divides?: boolean;
}

/** What the leases did since start (see `Limiter.leaseStats`). */
export interface LeaseStats {
  takes: number;
  granted: number;
  hits: number;
  refunds: number;
  refunded: number;
  dropped: number;
}

/** The default timeout of one Redis call (the Rust and Python clients' 50 ms). */
export const DEFAULT_TIMEOUT_MS = 50;

const SOURCES = native.decisionSources();

/** A decision from `Op.fields()`'s numbers (built here: cheaper than an object from the addon). */
function fromFields(f: number[], at = 0): Decision {
  return {
    allowed: f[at] === 1,
    limit: f[at + 1],
    remaining: f[at + 2],
    retryAfterMs: f[at + 3] === -1 ? null : f[at + 3],
    resetAfterMs: f[at + 4],
    source: SOURCES[f[at + 5]],
    shadow: f[at + 6] === 1,
  };
}

/** A `checkAll` decision from `Op.multiFields()`'s numbers. */
function fromMultiFields(f: number[]): MultiDecision {
  const decisions: Decision[] = [];
  for (let at = 3; at < f.length; at += 7) decisions.push(fromFields(f, at));
  return {
    allowed: f[0] === 1,
    deniedIndex: f[1] === -1 ? null : f[1],
    retryAfterMs: f[2] === -1 ? null : f[2],
    decisions,
  };
}

/**
 * Rate limiting on the redis-rl module (or its Lua twin) with your own Redis client.
 *
 * `check` and `checkAll` never throw for Redis trouble: every call has a timeout, failures
 * count towards the circuit breaker, and when Redis cannot answer the policy's failure mode
 * decides (`decision.source` says who decided). Bad arguments throw before anything is sent.
 *
 * ```js
 * const limiter = new Limiter(new Redis());
 * const d = await limiter.check('api:alice', policies.tokenBucket(100, 100, 60_000));
 * if (!d.allowed) reply429(d.retryAfterMs);
 * ```
 */
export class Limiter {
  readonly client: RedisLike;
  readonly timeoutMs: number;
  private readonly sender: Sender;
  /** The timeout of each call (none when `timeoutMs` is 0). */
  private readonly deadlines: Deadlines | null;
  /** @internal The addon's limiter (the middleware's flow builds its booking op on it). */
  readonly core: InstanceType<typeof native.Core>;
  /** The fleet membership, if any. */
  readonly fleet: FleetOptions | null;
  /** The leases, if any. */
  readonly leases: LeaseOptions | null;

  constructor(client: RedisLike, options: LimiterOptions = {}) {
    this.client = client;
    this.sender = senderFor(client);
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.deadlines = this.timeoutMs > 0 ? new Deadlines(this.timeoutMs) : null;
    this.core = new native.Core({
      engine: options.engine,
      cluster: this.sender.cluster,
      denyCache: options.denyCache,
      breakerFailures: options.breakerFailures,
      breakerOpenMs: options.breakerOpenMs,
      localCapacity: options.localCapacity,
      fleet: options.fleet,
      leases: options.leases,
    });
    this.fleet = options.fleet ?? null;
    this.leases = options.leases ?? null;
  }

  /**
   * Renews this limiter's fleet membership when a heartbeat is due and gives back the unspent
   * units of the leases that ended (call it from a timer, a few times per `heartbeatMs` and
   * at least twice per lease `lifetimeMs`; nothing is sent when nothing is due) and returns the live
   * fleet size once known (null before, or without membership). Never throws: a failed
   * heartbeat keeps the last size.
   */
  async heartbeat(): Promise<number | null> {
    // The heartbeat when due, then the refund of each lease that ended (bounded per tick:
    // the next tick goes on).
    for (let i = 0; i < 1000; i++) {
      const op = this.core.pending(Date.now());
      if (op === null) break;
      try {
        await this.run(op, op.routingKey);
      } catch {
        // the size stays; a refund not made leaves its units counted until the window ends
      }
    }
    return this.fleetSize;
  }

  /** The leases since start: batches taken (`takes`) and their units (`granted`), requests
   * served from a lease without a call (`hits`), refunds sent (`refunds`) and their units
   * (`refunded`), unspent units not given back (`dropped`). */
  get leaseStats(): LeaseStats {
    const [takes, granted, hits, refunds, refunded, dropped] = this.core.leaseStats;
    return { takes, granted, hits, refunds, refunded, dropped };
  }

  /** Gives back every lease's unspent units (at shutdown). Never throws. */
  async releaseLeases(): Promise<void> {
    await Promise.all(
      this.core.releaseLeases().map(async (op) => {
        try {
          await this.run(op, op.routingKey);
        } catch {
          // the units stay counted until their window ends
        }
      }),
    );
  }

  /** Releases this limiter's membership (at shutdown), so the others stop counting it at
   * their next heartbeat (best effort: otherwise it expires after `ttlMs`). Never throws. */
  async leaveFleet(): Promise<void> {
    const op = this.core.leave();
    if (op === null) return;
    try {
      await this.run(op, op.routingKey);
    } catch {
      // the membership expires on its own
    }
  }

  /** The live fleet size once a heartbeat read it (null before, or without membership). */
  get fleetSize(): number | null {
    return this.core.fleetSize;
  }

  /** Takes `cost` units (0: look without taking) for `key`. */
  check(key: string, policy: Policy, cost = 1): Promise<Decision> {
    return this.decide(this.core.check(key, policy, cost, false), key);
  }

  /** What taking `cost` units would answer, taking nothing (`PEEK`). */
  peek(key: string, policy: Policy, cost = 1): Promise<Decision> {
    return this.decide(this.core.check(key, policy, cost, true), key);
  }

  /** A single key's op: the reply fed and the decision read in one call on the usual path. */
  private async decide(op: Op, key: string): Promise<Decision> {
    const words = op.start();
    if (words === null) return fromFields(op.fields());
    let reply: unknown;
    try {
      reply = await this.send(words, key);
    } catch (e) {
      await this.run(op, key, this.failed(op, e));
      return fromFields(op.fields());
    }
    return fromFields(op.feedFields(reply ?? null) as number[]);
  }

  /** A checkAll op: the reply fed and the decisions read in one call on the usual path. */
  private async decideAll(op: Op, key: string): Promise<MultiDecision> {
    const words = op.start();
    if (words === null) return fromMultiFields(op.multiFields());
    let reply: unknown;
    try {
      reply = await this.send(words, key);
    } catch (e) {
      await this.run(op, key, this.failed(op, e));
      return fromMultiFields(op.multiFields());
    }
    const fields = op.feedMultiFields(reply ?? null);
    if (fields.length > 0) return fromMultiFields(fields);
    // A hot key's lease was taken first: the rest of the op (its `RL.ALL`).
    await this.run(op, key, op.takeNext());
    return fromMultiFields(op.multiFields());
  }

  private failed(op: Op | Query, e: unknown): string[] | null {
    return op.fail(messageOf(e), e instanceof TimeoutError || !isReplyError(e));
  }

  /**
   * Takes `cost` units on every key (or `cost[i]` on `items[i]`) if every enforced key allows
   * it, else nothing: one atomic `RL.ALL`. On a cluster, one `RL.ALL` per hash slot, every
   * slot at once (one round trip of latency): when a slot denies, what the slots that
   * allowed took in Redis is given back (`RL.REFUND`; between the take and the refund another
   * client can see the lower count), as the Rust and Python clients do. Shadow policies are
   * checked on their own and never deny.
   */
  async checkAll(items: [string, Policy][], cost: number | number[] = 1): Promise<MultiDecision> {
    const costAt = (i: number) => (Array.isArray(cost) ? (cost[i] ?? 1) : cost);
    if ((this.sender.cluster && items.length > 1) || items.some(([, p]) => p.shadow)) {
      return this.acrossSlots(items, costAt);
    }
    const op = this.core.checkAll();
    for (let i = 0; i < items.length; i++) op.add(items[i][0], items[i][1], costAt(i));
    return this.decideAll(op, items.length > 0 ? items[0][0] : '');
  }

  /** `checkAll` by the client's `AcrossSlots`: each round's ops at once (the slots' `RL.ALL`
   * and the shadow keys' checks, then the refunds); the first error that is the call's is
   * thrown once the refunds are sent. */
  private async acrossSlots(items: [string, Policy][], costAt: (i: number) => number): Promise<MultiDecision> {
    const across = this.core.checkAllAcross();
    items.forEach(([key, policy], i) => across.add(key, policy, costAt(i)));
    return this.rounds(across);
  }

  /**
   * Every item's own decision for taking `units[i]` on `items[i]`, taking nothing: one
   * `RL.ALL ... COSTS ... PEEK` per hash slot (the module, or the Lua twin), asked of Redis
   * itself (not the deny cache, whose waits would be stale). Throws when Redis cannot answer.
   */
  async peekAllUnits(items: [string, Policy][], units: number[]): Promise<Decision[]> {
    return this.everyKey(items, units, false);
  }

  /**
   * Takes `units[i]` on each of `items[i]` even over the limits: one `RL.ALL ... COSTS ...
   * FORCE` per hash slot (the module, or the Lua twin); what went past a limit is a debt the
   * next callers wait for. Throws when Redis cannot answer (a slot that failed: the others
   * may have taken their units).
   */
  async forceAllUnits(items: [string, Policy][], units: number[]): Promise<Decision[]> {
    return this.everyKey(items, units, true);
  }

  /** `peekAllUnits` and `forceAllUnits`: the client's `each` op, as Python's and Rust's. */
  private async everyKey(items: [string, Policy][], units: number[], force: boolean): Promise<Decision[]> {
    const across = this.core.each(force);
    items.forEach(([key, policy], i) => across.add(key, policy, units[i] ?? 1));
    return (await this.rounds(across)).decisions;
  }

  /** Runs the rounds of `across` (each round's ops at once), then its decision; the first
   * error that is the call's is thrown once the refunds are sent. */
  private async rounds(across: AcrossSlots): Promise<MultiDecision> {
    let error: { reason: unknown } | null = null;
    for (let ops = across.nextRound(); ops.length > 0; ops = across.nextRound()) {
      const ran = await Promise.allSettled(ops.map((op) => this.run(op, op.routingKey)));
      ran.forEach((r, i) => {
        if (r.status === 'fulfilled') across.done(i, ops[i]);
        else if (across.failed(i, messageOf(r.reason)) && error === null) error = { reason: r.reason };
      });
    }
    if (error !== null) throw (error as { reason: unknown }).reason;
    return across.multi();
  }

  /**
   * Takes up to `n` units of `key` in one call (`COST n UPTO`), as many as are available;
   * give back what is not spent with `refund`. Throws when Redis cannot answer.
   */
  async takeUpto(key: string, policy: Policy, n: number): Promise<Grant> {
    const op = this.core.takeUpto(key, policy, n, false);
    await this.run(op, key);
    return op.grant();
  }

  /** What `takeUpto` would grant now (`UPTO PEEK`), taking nothing. */
  async peekUpto(key: string, policy: Policy, n: number): Promise<Grant> {
    const op = this.core.takeUpto(key, policy, n, true);
    await this.run(op, key);
    return op.grant();
  }

  /** Gives back up to `amount` units taken earlier (`RL.REFUND`); the units given back.
   * Throws when Redis cannot answer. */
  async refund(key: string, policy: Policy, amount: number): Promise<number> {
    const op = this.core.refund(key, policy, amount);
    await this.run(op, key);
    return op.units();
  }

  /**
   * Settles a reservation of `reserved` units (taken earlier with `check(key, policy,
   * reserved)`) against the `actual` cost: refunds the difference, or takes the rest even
   * over the limit (`FORCE`). Throws when Redis cannot answer.
   */
  async settle(key: string, policy: Policy, reserved: number, actual: number): Promise<Settled> {
    const op = this.core.settle(key, policy, reserved, actual);
    await this.run(op, key);
    return op.settled();
  }

  /**
   * Sends one command as it is through the client (with the limiter's timeout; `key` routes
   * it on a cluster): for commands no limiter layer touches (ban reads, top offenders).
   * Throws what the client throws.
   */
  query(words: string[], key: string): Promise<unknown> {
    return this.send(words, key);
  }

  /**
   * `key`'s `RL.STATE` reply as the client gives it (the module's, or the Lua twin's: the
   * same fields), `null` for a key without state. Throws when Redis cannot answer.
   */
  async state(key: string): Promise<unknown> {
    const query = native.Query.state(this.core, key);
    await this.run(query, key);
    return query.reply();
  }

  /** @internal The client is a cluster client. */
  get cluster(): boolean {
    return this.sender.cluster;
  }

  /**
   * @internal Sends `first` (`key` routes it) and the commands `fail` gives after an error
   * (the twin, `EVAL`), with the limiter's timeout: the reply, or undefined when `first` is
   * empty or `fail` gives null (decided without Redis). Throws what `fail` throws.
   */
  async exchange(first: string[], key: string, fail: (message: string, outage: boolean) => string[] | null): Promise<unknown> {
    let next: string[] | null = first;
    while (next !== null && next.length > 0) {
      try {
        return await this.send(next, key);
      } catch (e) {
        next = fail(messageOf(e), e instanceof TimeoutError || !isReplyError(e));
      }
    }
    return undefined;
  }

  /** @internal `exchange` in two halves, for the middleware's usual request (no promise of
   * its own): sends `first` and calls `onReply` with the reply or `onError` with the error
   * (a timeout is one), once; neither may throw. After a failure, `exchangeAfter` with its
   * error. */
  sendThen(first: string[], key: string, onReply: (reply: unknown) => void, onError: (error: unknown) => void): void {
    const sent = this.sender.send(first, key);
    if (this.deadlines === null) sent.then(onReply, onError);
    else this.deadlines.notify(sent, onReply, onError);
  }

  /** @internal Holds the commands sent from now on until the function returned is
   * called, then writes them at once (the client's `Sender.cork`); null: not held. */
  cork(): (() => void) | null {
    return this.sender.cork();
  }

  /** @internal See `sendThen`. */
  exchangeAfter(error: unknown, key: string, fail: (message: string, outage: boolean) => string[] | null): Promise<unknown> {
    const next = fail(messageOf(error), error instanceof TimeoutError || !isReplyError(error));
    return next === null ? Promise.resolve(undefined) : this.exchange(next, key, fail);
  }


  /** `module` or `lua`: how the next call reaches the server. */
  get route(): string {
    return this.core.route;
  }

  /** The circuit breaker: `closed`, `open` or `half_open`. */
  get breakerState(): string {
    return this.core.breakerState;
  }

  /** Drives `op` to its end over the client (from `next`, or from its start). */
  private async run(op: Op | Query, key: string, next: string[] | null = op.start()): Promise<void> {
    while (next !== null) {
      let reply: unknown;
      try {
        reply = await this.send(next, key);
      } catch (e) {
        next = this.failed(op, e);
        continue;
      }
      next = op.feed(reply ?? null);
    }
  }

  private send(words: string[], key: string): Promise<unknown> {
    const sent = this.sender.send(words, key);
    return this.deadlines === null ? sent : this.deadlines.watch(sent);
  }
}
