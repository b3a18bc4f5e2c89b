// A drop-in for rate-limiter-flexible's RateLimiterRedis: the same options, methods and
// results, decided by redis-rl (a fixed window per key; blocks as a second limiter key in the
// same atomic RL.ALL). Where the semantics differ, README.md ("rate-limiter-flexible") says how.
import { Limiter, type Decision, type LimiterOptions } from './limiter.js';
import { policies, type Policy } from './policy.js';
import { isReplyError, messageOf, senderFor, type RedisLike } from './client.js';

/** rate-limiter-flexible's result: resolved when the points were consumed, rejected when not. */
export class RateLimiterRes {
  msBeforeNext: number;
  remainingPoints: number;
  consumedPoints: number;
  isFirstInDuration: boolean;

  constructor(remainingPoints = 0, msBeforeNext = 0, consumedPoints = 0, isFirstInDuration = false) {
    this.remainingPoints = remainingPoints;
    this.msBeforeNext = msBeforeNext;
    this.consumedPoints = consumedPoints;
    this.isFirstInDuration = isFirstInDuration;
  }

  toJSON() {
    return {
      remainingPoints: this.remainingPoints,
      msBeforeNext: this.msBeforeNext,
      consumedPoints: this.consumedPoints,
      isFirstInDuration: this.isFirstInDuration,
    };
  }

  toString(): string {
    return JSON.stringify(this.toJSON());
  }
}

export interface RateLimiterRedisOptions extends LimiterOptions {
  /** The application's Redis client (ioredis, iovalkey, node-redis). */
  storeClient: RedisLike;
  /** Points per `duration` (default 4). */
  points?: number;
  /** The window in seconds (default 1). */
  duration?: number;
  /** Seconds a key is blocked once it consumes more than `points` (default 0: no block). */
  blockDuration?: number;
  /** Prepended to every key, with a colon (default `rlflx`). */
  keyPrefix?: string;
}

// The block of a key is a token bucket next to it, refilled by BLOCK_RATE tokens per ms:
// every consume takes one token of it (no block can come from that below BLOCK_RATE
// consumes per ms), a block forces BLOCK_RATE tokens per ms of block as a debt, and RL.ALL
// denies the key until the debt is paid.
const BLOCK_RATE = 100_000;
const blockPolicy = policies.tokenBucket(BLOCK_RATE, BLOCK_RATE, 1);

/** rate-limiter-flexible's `RateLimiterRedis`, on redis-rl. */
export class RateLimiterRedis {
  readonly points: number;
  readonly duration: number;
  blockDuration: number;
  readonly keyPrefix: string;
  private readonly limiter: Limiter;
  private readonly client: RedisLike;
  private readonly policy: Policy;
  /** Blocks are looked at on every consume once this instance set one or may set one. */
  private blocking: boolean;

  constructor(opts: RateLimiterRedisOptions) {
    if (!opts || !opts.storeClient) throw new TypeError('RateLimiterRedis: storeClient is required');
    this.points = opts.points ?? 4;
    this.duration = opts.duration ?? 1;
    this.blockDuration = opts.blockDuration ?? 0;
    this.keyPrefix = opts.keyPrefix ?? 'rlflx';
    this.client = opts.storeClient;
    // rate-limiter-flexible rejects with an Error when its store fails: the failure mode
    // closed, turned into that error below.
    this.policy = policies.fixed(this.points, this.duration * 1000).onFailure('closed');
    this.limiter = new Limiter(opts.storeClient, { denyCache: 0, ...opts });
    this.blocking = this.blockDuration > 0;
  }

  /** The window in milliseconds. */
  get msDuration(): number {
    return this.duration * 1000;
  }

  /** The block in milliseconds. */
  get msBlockDuration(): number {
    return this.blockDuration * 1000;
  }

  /** The key as stored (`keyPrefix:key`). */
  getKey(key: string | number): string {
    return this.keyPrefix.length > 0 ? `${this.keyPrefix}:${key}` : String(key);
  }

  /** The key without its prefix. */
  parseKey(rlKey: string): string {
    return this.keyPrefix.length > 0 ? rlKey.substring(this.keyPrefix.length + 1) : rlKey;
  }

  // Tagged with the key itself, so a cluster holds both in one slot (one RL.ALL).
  private blockKey(key: string | number): string {
    return `{${this.getKey(key)}}:block`;
  }

  private result(d: Decision, points: number): RateLimiterRes {
    const consumed = d.limit - d.remaining;
    if (d.allowed) {
      return new RateLimiterRes(d.remaining, d.resetAfterMs, consumed, consumed === points);
    }
    // Nothing was taken; rate-limiter-flexible counts the refused points too.
    return new RateLimiterRes(0, d.retryAfterMs ?? d.resetAfterMs, consumed + points, false);
  }

  private unavailable(d: Decision): void {
    if (d.source === 'fail_closed') throw new Error('redis-rl: Redis did not answer');
  }

  /** Consumes `points` for `key`: resolves with the result, rejects with it when there are
   * not enough (and blocks the key for `blockDuration` then), or with an Error when Redis fails. */
  async consume(key: string | number, points = 1): Promise<RateLimiterRes> {
    const rlKey = this.getKey(key);
    let d: Decision;
    if (this.blocking) {
      const m = await this.limiter.checkAll(
        [
          [rlKey, this.policy],
          [this.blockKey(key), blockPolicy],
        ],
        [points, 1],
      );
      const main = m.decisions[0];
      this.unavailable(main);
      if (m.deniedIndex === 1) {
        throw new RateLimiterRes(0, m.decisions[1].retryAfterMs ?? 0, this.points + points, false);
      }
      d = m.allowed ? main : { ...main, allowed: false };
    } else {
      d = await this.limiter.check(rlKey, this.policy, points);
      this.unavailable(d);
    }
    const res = this.result(d, points);
    if (d.allowed) return res;
    if (this.blockDuration > 0 && points <= this.points) {
      await this.block(key, this.blockDuration);
      res.msBeforeNext = this.msBlockDuration;
    }
    throw res;
  }

  /** Adds `points` even over the limit (FORCE). */
  async penalty(key: string | number, points = 1): Promise<RateLimiterRes> {
    const s = await this.limiter.settle(this.getKey(key), this.policy, 0, points);
    const d = s.decision as Decision;
    return new RateLimiterRes(d.remaining, d.resetAfterMs, d.limit - d.remaining, false);
  }

  /** Gives back `points` (RL.REFUND: at most what was consumed). */
  async reward(key: string | number, points = 1): Promise<RateLimiterRes> {
    await this.limiter.refund(this.getKey(key), this.policy, points);
    return (await this.get(key)) ?? new RateLimiterRes(this.points, 0, 0, false);
  }

  /** Blocks `key` for `secDuration` seconds. */
  async block(key: string | number, secDuration: number): Promise<RateLimiterRes> {
    this.blocking = true;
    const ms = Math.ceil(secDuration * 1000);
    await this.limiter.settle(this.blockKey(key), blockPolicy, 0, BLOCK_RATE * (ms + 1));
    return new RateLimiterRes(0, ms, this.points + 1, false);
  }

  /** The key's state, or `null` when it has consumed nothing in this window. */
  async get(key: string | number): Promise<RateLimiterRes | null> {
    const d = await this.limiter.peek(this.getKey(key), this.policy, 0);
    this.unavailable(d);
    const consumed = d.limit - d.remaining;
    if (consumed === 0) return null;
    return new RateLimiterRes(d.remaining, d.resetAfterMs, consumed, false);
  }

  /** Sets the consumed points of `key` (the window stays the policy's: `secDuration` is not
   * used, see README). */
  async set(key: string | number, points: number, secDuration = 0): Promise<RateLimiterRes> {
    void secDuration;
    await this.delete(key);
    if (points > 0) await this.limiter.settle(this.getKey(key), this.policy, 0, points);
    return new RateLimiterRes(Math.max(this.points - points, 0), this.msDuration, points, false);
  }

  /** Forgets `key` (and its block): true when it existed. */
  async delete(key: string | number): Promise<boolean> {
    const sender = senderFor(this.client);
    try {
      const n = await sender.send(['DEL', this.getKey(key)], this.getKey(key));
      await sender.send(['DEL', this.blockKey(key)], this.blockKey(key));
      return Number(n) > 0;
    } catch (e) {
      throw isReplyError(e) ? e : new Error(`redis-rl: ${messageOf(e)}`);
    }
  }
}
