// redis-rl for Node.js: the limiter, policies, drop-ins and middleware.
export { Limiter, DEFAULT_TIMEOUT_MS } from './limiter.js';
export type { Decision, MultiDecision, Grant, Settled, LimiterOptions, FleetOptions, LeaseOptions, LeaseStats } from './limiter.js';
export { policies } from './policy.js';
export type { Policy, Policies, PolicyOptions } from './policy.js';
export type { RedisLike } from './client.js';
export { RateLimiterRedis, RateLimiterRes } from './flexible.js';
export type { RateLimiterRedisOptions } from './flexible.js';
export { RedisRlStore } from './store.js';
export type { RedisRlStoreOptions } from './store.js';
export { rateLimit } from './express.js';
export type { RateLimitHandler } from './express.js';
export { FlowDriver, loadFlow } from './flow.js';
export type { RateLimitOptions, RateLimitConfig, TierResolver, Verdict, HttpRequest } from './flow.js';
export { fastifyRateLimit } from './fastify.js';
export { honoRateLimit } from './hono.js';
export type { HonoRateLimitOptions, HonoRateLimitHandler } from './hono.js';
