// An express-rate-limit Store on redis-rl: a fixed window of express-rate-limit's `limit`
// per `windowMs`, decided atomically by the module (or its Lua twin). README.md
// ("express-rate-limit") says where it differs from rate-limit-redis.
import { Limiter, type LimiterOptions } from './limiter.js';
import { policies, type Policy } from './policy.js';
import { senderFor, type RedisLike } from './client.js';

export interface RedisRlStoreOptions extends LimiterOptions {
  /** The application's Redis client (ioredis, iovalkey, node-redis). */
  client: RedisLike;
  /** Prepended to every key (default `rl:`, as rate-limit-redis). */
  prefix?: string;
  /** The limit, when express-rate-limit's `limit` is a function (it must be a number otherwise). */
  limit?: number;
  /** The window in ms, when not express-rate-limit's `windowMs`. */
  windowMs?: number;
}

interface ClientRateLimitInfo {
  totalHits: number;
  resetTime: Date | undefined;
}

/** What express-rate-limit passes to `init` (the fields read here). */
interface InitOptions {
  windowMs?: number;
  limit?: unknown;
  max?: unknown;
}

/** express-rate-limit's `Store`, on redis-rl. */
export class RedisRlStore {
  readonly prefix: string;
  /** Keys are shared by every instance (they live in Redis). */
  readonly localKeys = false;
  private readonly limiter: Limiter;
  private readonly client: RedisLike;
  private limit: number | undefined;
  private windowMs: number | undefined;
  private policy: Policy | undefined;

  constructor(options: RedisRlStoreOptions) {
    if (!options || !options.client) throw new TypeError('RedisRlStore: client is required');
    this.client = options.client;
    this.prefix = options.prefix ?? 'rl:';
    this.limit = options.limit;
    this.windowMs = options.windowMs;
    // Denied calls write nothing: no deny cache, so a count read by `get` is Redis's.
    this.limiter = new Limiter(options.client, { denyCache: 0, ...options });
    if (this.limit !== undefined && this.windowMs !== undefined) this.build();
  }

  /** Takes express-rate-limit's `windowMs` and (a number) `limit`. */
  init(options: InitOptions): void {
    this.windowMs ??= options.windowMs;
    const limit = options.limit ?? options.max;
    if (this.limit === undefined) {
      if (typeof limit !== 'number') {
        throw new TypeError(
          'RedisRlStore: express-rate-limit\'s limit must be a number (or give the store its own `limit`)',
        );
      }
      this.limit = limit;
    }
    this.build();
  }

  private build(): void {
    this.policy = policies.fixed(this.limit as number, this.windowMs ?? 60_000);
  }

  private ready(): Policy {
    if (!this.policy) throw new Error('RedisRlStore: init was not called (pass the store to rateLimit)');
    return this.policy;
  }

  private key(key: string): string {
    return this.prefix + key;
  }

  private info(limit: number, remaining: number, resetAfterMs: number, extra = 0): ClientRateLimitInfo {
    return { totalHits: limit - remaining + extra, resetTime: new Date(Date.now() + resetAfterMs) };
  }

  /** Counts a hit: over the limit, the hit is refused (nothing stored) and reported as
   * `limit + 1` so express-rate-limit refuses the request. */
  async increment(key: string): Promise<ClientRateLimitInfo> {
    const d = await this.limiter.check(this.key(key), this.ready());
    if (d.source === 'fail_closed' || d.source === 'fail_open') {
      throw new Error('redis-rl: Redis did not answer');
    }
    if (d.allowed) return this.info(d.limit, d.remaining, d.resetAfterMs);
    return { totalHits: d.limit + 1, resetTime: new Date(Date.now() + (d.retryAfterMs ?? d.resetAfterMs)) };
  }

  /** Gives one hit back (skipped requests). */
  async decrement(key: string): Promise<void> {
    await this.limiter.refund(this.key(key), this.ready(), 1);
  }

  /** The hits counted in the window. */
  async get(key: string): Promise<ClientRateLimitInfo | undefined> {
    const d = await this.limiter.peek(this.key(key), this.ready(), 0);
    if (d.remaining === d.limit) return undefined;
    return this.info(d.limit, d.remaining, d.resetAfterMs);
  }

  /** Forgets the client's hits. */
  async resetKey(key: string): Promise<void> {
    await senderFor(this.client).send(['DEL', this.key(key)], this.key(key));
  }
}
