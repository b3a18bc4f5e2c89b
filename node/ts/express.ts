// Express (4 and 5): the request flow as a middleware. Typed structurally, so the package
// needs no Express at run time and works with either major version.
import { FlowDriver, type HttpRequest, type RateLimitOptions, type VerdictTarget } from './flow.js';

interface ExpressRequest {
  method: string;
  originalUrl: string;
  url: string;
  rawHeaders: string[];
  headers: Record<string, string | string[] | undefined>;
  socket: { remoteAddress?: string };
}

interface ExpressResponse {
  statusCode: number;
  setHeader(name: string, value: string | string[]): unknown;
  getHeaders(): Record<string, number | string | string[] | undefined>;
  end(body?: string): unknown;
  on(event: 'finish', listener: () => void): unknown;
}

type Next = (error?: unknown) => void;

/** An Express middleware: `(req, res, next)`; `driver` is the flow's driver it runs;
 * `close()` at shutdown leaves the fleet (`[fleet]`) and stops its heartbeat. */
export type RateLimitHandler = ((req: ExpressRequest, res: ExpressResponse, next: Next) => void) & {
  driver: FlowDriver;
  close: () => Promise<void>;
};

/** The client's address as the flow reads it (an IPv4 peer on a dual-stack socket without `::ffff:`). */
export function peerOf(address: string | undefined): string | null {
  if (!address) return null;
  return address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address;
}

/** The response's headers as `[name, value]` pairs (for the settlement). */
export function responseHeaders(res: Pick<ExpressResponse, "getHeaders">): [string, string][] {
  const pairs: [string, string][] = [];
  for (const [name, value] of Object.entries(res.getHeaders())) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) pairs.push([name, String(v)]);
  }
  return pairs;
}

/**
 * Rate-limits every request through the flow rl-gateway runs, configured by the same TOML
 * (`config`: its path, or the same structure as an object):
 *
 * ```js
 * app.use(rateLimit({ client: new Redis(), config: 'rl.toml' }));
 * ```
 *
 * A refused request gets its status, `RateLimit*` headers and problem+json body here; an
 * allowed one goes on with the headers set (after its hold, under `delay_max_ms`), and a
 * rule's cost is settled from the response's header once it is sent. A bad configuration
 * throws here (the application's start), naming the file, the line and the field.
 */
export function rateLimit(options: RateLimitOptions): RateLimitHandler {
  const driver = new FlowDriver(options);
  const handler = (req: ExpressRequest, res: ExpressResponse, next: Next): void => {
    const q = req.originalUrl.indexOf('?');
    // The request as the flow reads it and Express's own objects, in one.
    const call: ExpressCall = {
      method: req.method,
      path: q === -1 ? req.originalUrl : req.originalUrl.slice(0, q),
      rawHeaders: req.rawHeaders,
      peer: peerOf(req.socket.remoteAddress),
      req,
      res,
      next,
      q,
    };
    driver.run(call, call, EXPRESS);
  };
  return Object.assign(handler, { driver, close: () => driver.close() });
}

/** One request of the middleware: the request as the flow reads it (with the path it was
 * given), and Express's own objects. */
interface ExpressCall extends HttpRequest {
  req: ExpressRequest;
  res: ExpressResponse;
  next: Next;
  /** Where the query starts in `req.originalUrl` (-1: none). */
  q: number;
}

/** What Express does with the flow's verdict. */
const EXPRESS: VerdictTarget<ExpressCall> = {
  forward({ req, res, next, path, q }, names, values, requestId, traceparent, normal, finish) {
    // Looked up once (Express's response reaches it through a chain of prototypes).
    const setHeader = res.setHeader;
    for (let i = 0; i < names.length; i++) setHeader.call(res, names[i], values[i]);
    setHeader.call(res, 'x-request-id', requestId);
    // The application sees the request id the response carries, and the trace with this
    // hop as the parent (as rl-gateway forwards them).
    const headers = req.headers;
    headers['x-request-id'] = requestId;
    headers.traceparent = traceparent;
    if (normal !== path && req.url === req.originalUrl) {
      // The application sees the path's normal form, as rl-gateway forwards it.
      req.url = normal + (q === -1 ? '' : req.originalUrl.slice(q));
    }
    if (finish !== null) res.on('finish', () => void finish(responseHeaders(res)));
    next();
  },
  respond({ res }, status, headers, body) {
    res.statusCode = status;
    for (const [name, value] of headers) res.setHeader(name, value);
    res.setHeader('content-length', String(Buffer.byteLength(body)));
    res.end(body);
  },
  pass({ next }) {
    next();
  },
  fail({ next }, error) {
    next(error);
  },
};
