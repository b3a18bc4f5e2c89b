// Hono: the request flow as a middleware, thin over the same driver as Express. Typed
// structurally, so the package needs no Hono at run time.
import { FlowDriver, type RateLimitOptions } from './flow.js';

interface HonoContext {
  req: { method: string; raw: Request; routePath?: string };
  env?: unknown;
  res: Response;
  header(name: string, value: string): void;
  body(data: string, status: number, headers: Record<string, string>): Response;
}

export interface HonoRateLimitOptions extends RateLimitOptions {
  /** The client's address; default: @hono/node-server's socket (`c.env.incoming`). */
  peer?: (c: HonoContext) => string | null | undefined;
}

function nodePeer(c: HonoContext): string | null {
  const env = c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined;
  const address = env?.incoming?.socket?.remoteAddress;
  if (!address) return null;
  return address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address;
}

/** A Hono middleware: `(c, next)`; `close()` at shutdown leaves the fleet (`[fleet]`) and
 * stops its heartbeat. */
export type HonoRateLimitHandler = ((c: HonoContext, next: () => Promise<void>) => Promise<Response | void>) & {
  driver: FlowDriver;
  close: () => Promise<void>;
};

/** A Hono middleware: `app.use(honoRateLimit(options))`; options as `rateLimit`'s, plus `peer`. */
export function honoRateLimit(options: HonoRateLimitOptions): HonoRateLimitHandler {
  const driver = new FlowDriver(options);
  const peer = options.peer ?? nodePeer;
  const handler = async (c: HonoContext, next: () => Promise<void>): Promise<Response | void> => {
    const headers: [string, string][] = [];
    c.req.raw.headers.forEach((value, name) => headers.push([name, value]));
    const verdict = await driver.decide({
      method: c.req.method,
      path: new URL(c.req.raw.url).pathname,
      headers,
      peer: peer(c) ?? null,
    });
    if (verdict === null) return next();
    if (verdict.kind === 'respond') {
      const out: Record<string, string> = {};
      for (const [name, value] of verdict.headers) out[name] = value;
      return c.body(verdict.body, verdict.status, out);
    }
    await next();
    for (const [name, value] of verdict.headers) c.res.headers.set(name, value);
    if (verdict.finish !== null) {
      // The response's headers are final once the handler returned: settled off its path.
      const response: [string, string][] = [];
      c.res.headers.forEach((value, name) => response.push([name, value]));
      void verdict.finish(response);
    }
  };
  return Object.assign(handler, { driver, close: () => driver.close() });
}
