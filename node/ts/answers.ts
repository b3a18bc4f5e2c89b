// A reader of the addon's answers in place: `Flow.beginMany` and `Flow.feedMany` answer a
// batch in one string, each answer after its length (UTF-16 code units) and a colon, its
// words joined by line feeds. Read word by word where they are, with no `split` (an array
// and a string per word, about a tenth of the middleware's own cost per request) and no
// string at all for a number or for a word the same as the last answer's (`SAME`).

/** A word the same as the one at its place in the last answer of its kind (`SAME` in
 * src/booking.rs: U+0001), as a character code. */
const SAME = 1;
const LINE_FEED = 10;
const COLON = 58;
const ZERO = 48;

export class AnswerReader {
  private text = '';
  /** The place of the next word. */
  private at = 0;
  /** The end of the current answer. */
  private end = 0;

  /** Reads `text`: a batch's answers, each after its length and a colon (`next` moves to the first). */
  batch(text: string): this {
    this.text = text;
    this.at = 0;
    this.end = 0;
    return this;
  }

  /** Reads `text` as one answer, from its first word. */
  one(text: string): this {
    this.text = text;
    this.at = 0;
    this.end = text.length;
    return this;
  }

  /** Moves to the batch's next answer. */
  next(): void {
    const text = this.text;
    let at = this.end;
    let length = 0;
    for (let c = text.charCodeAt(at); c !== COLON; c = text.charCodeAt(++at)) {
      if (Number.isNaN(c)) throw new Error('redis-rl: an answer of the addon cut short');
      length = length * 10 + (c - ZERO);
    }
    this.at = at + 1;
    this.end = this.at + length;
  }

  /** The code of the answer's next character (its kind, at its start). */
  peek(): number {
    return this.text.charCodeAt(this.at);
  }

  /** A word is left in the answer. */
  more(): boolean {
    return this.at < this.end;
  }

  /** The rest of the answer as it is (an error's message after its kind, a path). */
  rest(): string {
    const rest = this.text.slice(this.at, this.end);
    this.at = this.end;
    return rest;
  }

  /** The answer's next character (its kind), skipped with the line feed after it if any. */
  kind(): number {
    const c = this.text.charCodeAt(this.at);
    this.at += this.text.charCodeAt(this.at + 1) === LINE_FEED ? 2 : 1;
    return c;
  }

  /** The next word. */
  word(): string {
    const stop = this.stop();
    const word = this.text.slice(this.at, stop);
    this.at = stop + 1;
    return word;
  }

  /** The next word, a whole number. */
  number(): number {
    const text = this.text;
    const stop = this.stop();
    let n = 0;
    for (let i = this.at; i < stop; i++) n = n * 10 + (text.charCodeAt(i) - ZERO);
    this.at = stop + 1;
    return n;
  }

  /** The next word, `last` when it is `SAME`. */
  wordOr(last: string): string {
    if (this.text.charCodeAt(this.at) === SAME && this.stop() === this.at + 1) {
      this.at += 2;
      return last;
    }
    return this.word();
  }

  /** Where the next word ends: the next line feed, or the answer's end. */
  private stop(): number {
    const lf = this.text.indexOf('\n', this.at);
    return lf === -1 || lf > this.end ? this.end : lf;
  }
}
