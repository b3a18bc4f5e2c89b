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
}

type AnyFn = (...args: unknown[]) => Promise<unknown>;

/** The sender for `client`, or a TypeError naming what is accepted. */
export function senderFor(client: RedisLike): Sender {
  const c = client as Record<string, unknown>;
  // ioredis and iovalkey: `call(name, ...args)`; the cluster class has `isCluster`.
  if (typeof c.call === 'function') {
    const call = (c.call as AnyFn).bind(client);
    return {
      cluster: c.isCluster === true,
      send: (words) => call(...words),
    };
  }
  if (typeof c.sendCommand === 'function') {
    const send = (c.sendCommand as AnyFn).bind(client);
    // node-redis's cluster: `sendCommand(firstKey, isReadonly, args)`; it has `masters`.
    if ('masters' in c) {
      return { cluster: true, send: (words, key) => send(key, false, words) };
    }
    return { cluster: false, send: (words) => send(words) };
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
