// Replies as numbers for the addon's `Flow.feedMany`: a batch's replies (each after its
// request's number) written into one Float64Array the addon reads in place. What the module
// and the twin answer is numbers and arrays of them; the addon reading such a reply from
// JavaScript item by item cost about 2 us a request in an application with four limits
// (a crossing per array and per item), walking it here a small part of that.

// Each value is a tag and a number (the tags of `slot` in src/reply.rs).
const NUMBER = 0;
const ARRAY = 1;
const NIL = 2;
const OTHER = 3;

/** The slots of one batch: `slots[0, used)` written, `others` the values written as an index. */
export class ReplySlots {
  slots = new Float64Array(1024);
  used = 0;
  others: unknown[] = [];

  /** Empties it for the next batch (the slots kept). */
  clear(): void {
    this.used = 0;
    if (this.others.length > 0) this.others = [];
  }

  /** Writes request `id`'s `reply`. */
  write(id: number, reply: unknown): void {
    this.put(id);
    this.value(reply);
  }

  private value(v: unknown): void {
    if (typeof v === 'number') {
      this.pair(NUMBER, v);
    } else if (Array.isArray(v)) {
      this.pair(ARRAY, v.length);
      for (let i = 0; i < v.length; i++) this.value(v[i]);
    } else if (v === null || v === undefined) {
      this.put(NIL);
    } else {
      // A string, a Buffer, a map, a BigInt...: read by the addon as it is.
      this.pair(OTHER, this.others.length);
      this.others.push(v);
    }
  }

  private pair(tag: number, n: number): void {
    this.put(tag);
    this.put(n);
  }

  private put(n: number): void {
    if (this.used === this.slots.length) {
      const more = new Float64Array(this.slots.length * 2);
      more.set(this.slots);
      this.slots = more;
    }
    this.slots[this.used++] = n;
  }
}
