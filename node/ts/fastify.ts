// Fastify (4 and 5): the request flow as a plugin, thin over the same driver as Express.
// Typed structurally, so the package needs no Fastify at run time.
import { FlowDriver, type HttpRequest, type RateLimitOptions, type VerdictTarget } from './flow.js';
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

type HookDone = (error?: unknown) => void;

interface FastifyInstance {
  addHook(name: 'onRequest', hook: (request: FastifyRequest, reply: FastifyReply, done: HookDone) => void): unknown;
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
  app.addHook('onRequest', (request, reply, next) => {
    const q = request.url.indexOf('?');
    // The request as the flow reads it and Fastify's own objects, in one.
    const call: FastifyCall = {
      method: request.method,
      path: q === -1 ? request.url : request.url.slice(0, q),
      rawHeaders: request.raw.rawHeaders,
      peer: peerOf(request.raw.socket.remoteAddress),
      route: request.routeOptions?.url ?? null,
      request,
      reply,
      next,
    };
    driver.run(call, call, FASTIFY);
  });
  app.addHook('onClose', () => driver.close());
  done();
}

// Applies to the whole application, not an encapsulated child context (as fastify-plugin's
// wrapper marks it).
Object.assign(fastifyRateLimit, { [Symbol.for('skip-override')]: true });

/** One request of the plugin: the request as the flow reads it, and Fastify's own objects. */
interface FastifyCall extends HttpRequest {
  request: FastifyRequest;
  reply: FastifyReply;
  /** The hook's callback: Fastify goes on to the route (not called when the hook answers). */
  next: HookDone;
}

/** What Fastify does with the flow's verdict (a callback hook: no promise per request). */
const FASTIFY: VerdictTarget<FastifyCall> = {
  forward({ request, reply, next }, names, values, requestId, traceparent, _path, finish) {
    for (let i = 0; i < names.length; i++) reply.header(names[i], values[i]);
    reply.header('x-request-id', requestId);
    request.raw.headers['x-request-id'] = requestId;
    request.raw.headers.traceparent = traceparent;
    if (finish !== null) reply.raw.on('finish', () => void finish(responseHeaders(reply)));
    next();
  },
  respond({ reply }, status, headers, body) {
    reply.code(status);
    for (const [name, value] of headers) reply.header(name, value);
    reply.send(Buffer.from(body));
  },
  pass({ next }) {
    next();
  },
  fail({ next }, error) {
    next(error);
  },
};
