// The application's own Redis client, behind one function: send a command's words, get the
// reply or the error. ioredis and iovalkey (`call`), node-redis (`sendCommand`), their cluster
// classes; nothing is sent here that the Rust op did not build.

/** A Redis client of ioredis, iovalkey or node-redis (`redis` / `@redis/client`), standalone or cluster. */
export type RedisLike = object;

/** How one command reaches the server through the application's client. */
export interface Sender {
  /** The client is a cluster client (routes by key). */
  readonly cluster: boolean;
  /** Sends `words` (a command and its arguments); `key` routes it on a cluster. */
  send(words: string[], key: string): Promise<unknown>;
  /** Holds the commands sent from now on in the client's socket until the function
   * returned is called, then writes them at once (one system call for a batch instead
   * of one per command); null when the client's socket is not reachable (node-redis, a
   * cluster) or not connected: each command goes as it is sent. */
  cork(): (() => void) | null;
}

/** A writable stream's `cork`/`uncork` (Node's net.Socket). */
interface Corkable {
  writable: boolean;
  cork(): void;
  uncork(): void;
}

/** The uncork of `stream` after corking it, or null when it cannot be. */
function corkStream(stream: unknown): (() => void) | null {
  const s = stream as Partial<Corkable> | null | undefined;
  if (!s || s.writable !== true || typeof s.cork !== 'function' || typeof s.uncork !== 'function') return null;
  s.cork();
  return () => (s as Corkable).uncork();
}

const NO_CORK = (): null => null;

type AnyFn = (...args: unknown[]) => Promise<unknown>;

/** The sender for `client`, or a TypeError naming what is accepted. */
export function senderFor(client: RedisLike): Sender {
  const c = client as Record<string, unknown>;
  // ioredis and iovalkey: `call(name, ...args)`; the cluster class has `isCluster`.
  if (typeof c.call === 'function') {
    const call = (c.call as AnyFn).bind(client);
    const cluster = c.isCluster === true;
    return {
      cluster,
      send: (words) => call(...words),
      // ioredis and iovalkey write each command into `stream`, their connection's socket.
      cork: cluster ? NO_CORK : () => corkStream(c.stream),
    };
  }
  if (typeof c.sendCommand === 'function') {
    const send = (c.sendCommand as AnyFn).bind(client);
    // node-redis's cluster: `sendCommand(firstKey, isReadonly, args)`; it has `masters`.
    if ('masters' in c) {
      return { cluster: true, send: (words, key) => send(key, false, words), cork: NO_CORK };
    }
    return { cluster: false, send: (words) => send(words), cork: NO_CORK };
  }
  throw new TypeError(
    'redis-rl: the client must be an ioredis, iovalkey or node-redis client (standalone or cluster)',
  );
}

/** True for an error reply of the server (not a connection failure or a timeout). */
export function isReplyError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  // ioredis and iovalkey: ReplyError (redis-errors); node-redis: ErrorReply and its
  // subclasses SimpleError and BlobError.
  let proto: unknown = Object.getPrototypeOf(error);
  while (proto && proto !== Error.prototype) {
    const name = (proto as { constructor?: { name?: string } }).constructor?.name;
    if (name === 'ReplyError' || name === 'ErrorReply') return true;
    proto = Object.getPrototypeOf(proto);
  }
  return false;
}

/** The text of an error (an error reply's text is the server's: `NOSCRIPT ...`). */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
