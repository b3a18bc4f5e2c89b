// The limiter's timeout on each call to Redis, with one timer for all calls in flight
// instead of one per call: every call of a limiter has the same timeout, so the calls'
// deadlines come in the order they were sent, and a queue in that order needs only its
// head watched. A setTimeout and a clearTimeout per call cost about 0.9 us of CPU per
// request (node/bench/middleware-cost.mjs), a tenth of the middleware's own cost.

/** The call did not answer within the limiter's timeout. */
export class TimeoutError extends Error {}

interface Waiting {
  due: number;
  /** Settled already (answered, failed or timed out): skipped when its deadline comes. */
  done: boolean;
  reject: (error: Error) => void;
}

/** The `reject` of a settled call's record. */
const SETTLED = (): void => undefined;

export class Deadlines {
  private readonly queue: Waiting[] = [];
  /** The index of the oldest call still in `queue` (the front is dropped in batches). */
  private head = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly ms: number) {}

  /** `sent`, rejected with a TimeoutError when it has not settled within the timeout. A
   * reply after that settles nothing. */
  watch(sent: Promise<unknown>): Promise<unknown> {
    return new Promise((resolve, reject) => this.notify(sent, resolve, reject));
  }

  /** Calls `onReply` with `sent`'s reply or `onError` with its error, or with a
   * TimeoutError when it has not settled within the timeout, once (a reply after that calls
   * nothing): `watch` without a promise of its own, for the middleware's usual request. */
  notify(sent: Promise<unknown>, onReply: (reply: unknown) => void, onError: (error: unknown) => void): void {
    const waiting: Waiting = { due: performance.now() + this.ms, done: false, reject: onError };
    this.queue.push(waiting);
    if (this.timer === null) this.arm(this.ms);
    sent.then(
      (reply) => {
        if (waiting.done) return;
        this.settled(waiting);
        onReply(reply);
      },
      (error: unknown) => {
        if (waiting.done) return;
        this.settled(waiting);
        onError(error);
      },
    );
  }

  /** Marks `waiting` settled and drops the settled calls at the front: replies on one
   * connection come in the order sent, so the front usually goes at once and a call's
   * record dies young (kept until its deadline, records would outlive the young
   * generation and cost the collector more than the timers they replace). A record still
   * queued behind an older call holds nothing of its request: its `reject` (a closure
   * over the request's objects in `notify`) goes at once. */
  private settled(waiting: Waiting): void {
    waiting.done = true;
    waiting.reject = SETTLED;
    const queue = this.queue;
    while (this.head < queue.length && queue[this.head].done) this.head += 1;
    if (this.head === queue.length) {
      queue.length = 0;
      this.head = 0;
    }
  }

  private arm(ms: number): void {
    this.timer = setTimeout(() => this.expire(), ms);
    // The calls themselves keep the process alive (the client's socket), not their watch.
    this.timer.unref();
  }

  /** Times out every call past its deadline, then waits for the oldest one left. */
  private expire(): void {
    this.timer = null;
    const now = performance.now();
    const queue = this.queue;
    while (this.head < queue.length) {
      const w = queue[this.head];
      if (!w.done) {
        if (w.due > now) break;
        w.done = true;
        w.reject(new TimeoutError(`redis-rl: no reply within ${this.ms} ms`));
      }
      this.head += 1;
    }
    if (this.head === queue.length) {
      queue.length = 0;
      this.head = 0;
      return;
    }
    // Drop the front once it is the larger part, so the queue does not grow without end
    // while calls keep coming.
    if (this.head > 1024 && this.head * 2 > queue.length) {
      queue.splice(0, this.head);
      this.head = 0;
    }
    this.arm(Math.max(1, Math.ceil(queue[this.head].due - now)));
  }
}
