// The addon's own cost per decision, without Redis: build the command of a check (and of a
// four-key checkAll), feed it a reply as a client hands it over, read the decision. This is
// what redis-rl adds to a request over sending the raw command by hand (`node
// bench/addon-cost.mjs`; bounded: a fixed number of rounds).
import native from '../dist/esm/load.js';
import { policies } from '../dist/esm/index.js';

const core = new native.Core({ denyCache: 0 });
const p = policies.sliding(1000, 60_000);
const reply = [1, 1000, 999, 0, 60000];
const allReply = [1, 0, [[1000, 999, 0, 60000], [1000, 999, 0, 60000], [1000, 999, 0, 60000], [1000, 999, 0, 60000]]];

const sources = native.decisionSources();
// The limiter's path for one key: make the op, start it, feed the reply and read the
// decision's numbers in one call, build the object in JavaScript.
function one(i) {
  const op = core.check(`k${i & 1023}`, p, 1, false);
  op.start();
  const f = op.feedFields(reply);
  return { allowed: f[0] === 1, limit: f[1], remaining: f[2], retryAfterMs: f[3] === -1 ? null : f[3], resetAfterMs: f[4], source: sources[f[5]], shadow: f[6] === 1 };
}

// The same with the decision as an object made by the addon (one more call).
function oneObject(i) {
  const op = core.check(`k${i & 1023}`, p, 1, false);
  op.start();
  op.feed(reply);
  return op.decision();
}

function four(i) {
  const op = core.checkAll();
  for (let k = 0; k < 4; k++) op.add(`k${k}:${i & 1023}`, p, 1);
  op.start();
  return op.feedMultiFields(allReply);
}

const raw = () => ['RL.SLIDING', 'k', '1000', '60000'];
function rawCall(i) {
  // What an app sending the command by hand does per request: the words, then the reply read.
  const words = raw();
  words[1] = `k${i & 1023}`;
  return reply[0] === 1 && { allowed: true, remaining: reply[2] };
}

function measure(name, f, n) {
  for (let i = 0; i < n / 10; i++) f(i); // warm up
  // CPU time of this process (user + system), not wall time: on a shared machine the wall
  // clock also counts the time other processes held the core.
  let best = Infinity;
  for (let round = 0; round < 5; round++) {
    const c0 = process.cpuUsage();
    for (let i = 0; i < n; i++) f(i);
    const c = process.cpuUsage(c0);
    best = Math.min(best, ((c.user + c.system) * 1000) / n);
  }
  console.log(`${name}: ${(best / 1000).toFixed(2)} us of CPU per call (best of 5 rounds of ${n})`);
}

measure('raw command by hand (words and reply fields, no addon)', rawCall, 200_000);
measure('check (one key): op, command, reply, decision', one, 200_000);
measure('check (one key), the decision as an object from the addon', oneObject, 200_000);
measure('checkAll (four keys): op, four adds, command, reply, decision numbers', four, 100_000);
