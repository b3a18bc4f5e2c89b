// Fastify (4 and 5): the request flow as a plugin, thin over the same driver as Express.
// Typed structurally, so the package needs no Fastify at run time.
import { FlowDriver, type RateLimitOptions } from './flow.js';
import { peerOf, responseHeaders } from './express.js';

interface FastifyRequest {
  method: string;
  url: string;
  raw: { rawHeaders: string[]; headers: Record<string, string | string[] | undefined>; socket: { remoteAddress?: string } };
  routeOptions?: { url?: string };
}

interface FastifyReply {
  code(status: number): FastifyReply;
  header(name: string, value: string): FastifyReply;
  send(body: Buffer): FastifyReply;
  getHeaders(): Record<string, number | string | string[] | undefined>;
  raw: { on(event: 'finish', listener: () => void): unknown };
}

interface FastifyInstance {
  addHook(name: 'onRequest', hook: (request: FastifyRequest, reply: FastifyReply) => Promise<unknown>): unknown;
  addHook(name: 'onClose', hook: () => Promise<void>): unknown;
}

/** A Fastify plugin: `app.register(fastifyRateLimit, options)`; options as `rateLimit`'s. */
export function fastifyRateLimit(app: FastifyInstance, options: RateLimitOptions, done: (error?: Error) => void): void {
  let driver: FlowDriver;
  try {
    driver = new FlowDriver(options);
  } catch (e) {
    // A bad configuration fails the application's start (`ready`, `listen`).
    done(e as Error);
    return;
  }
  app.addHook('onRequest', async (request, reply) => {
    const q = request.url.indexOf('?');
    const path = q === -1 ? request.url : request.url.slice(0, q);
    const verdict = await driver.decide({
      method: request.method,
      path,
      rawHeaders: request.raw.rawHeaders,
      peer: peerOf(request.raw.socket.remoteAddress),
      // Fastify has matched the route before this hook: the endpoint dimension's template.
      route: request.routeOptions?.url ?? null,
    });
    if (verdict === null) return;
    if (verdict.kind === 'respond') {
      reply.code(verdict.status);
      for (const [name, value] of verdict.headers) reply.header(name, value);
      // As bytes: a string would get `; charset=utf-8` appended to the problem+json type.
      return reply.send(Buffer.from(verdict.body));
    }
    for (const [name, value] of verdict.headers) reply.header(name, value);
    request.raw.headers['x-request-id'] = verdict.requestId;
    request.raw.headers.traceparent = verdict.traceparent;
    const finish = verdict.finish;
    // Fastify's own headers (it hands them to writeHead, not to the raw response).
    if (finish !== null) reply.raw.on('finish', () => void finish(responseHeaders(reply)));
    return;
  });
  // `app.close()`: leaves the fleet (`[fleet]`) and stops its heartbeat.
  app.addHook('onClose', () => driver.close());
  done();
}

// Applies to the whole application, not an encapsulated child context (as fastify-plugin's
// wrapper marks it).
Object.assign(fastifyRateLimit, { [Symbol.for('skip-override')]: true });
