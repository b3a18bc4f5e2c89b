// An Express 5 app behind the redis-rl middleware, for the cross-front-end test (python/tests/
// test_one_flow.py runs it next to rl-gateway and the Python middleware): every path and method
// answers 200, /healthz is not limited.
//   node scripts/express-app.mjs <port> <redis url> <config.toml> <tier hash>
// Prints "listening" once it serves; a bad configuration exits 1 with the engine's text.
import express from 'express';
import Redis from 'ioredis';
import { rateLimit } from '../dist/esm/index.js';

const [port, url, config, tierHash] = process.argv.slice(2);
const client = new Redis(url);
const app = express();
try {
  app.use(rateLimit({ client, config, tierHash, excludePaths: ['/healthz'], limiterOptions: { timeoutMs: 2000 } }));
} catch (e) {
  console.error(e.message);
  process.exit(1);
}
app.use((req, res) => res.json({ ok: true }));
const server = app.listen(Number(port), '127.0.0.1', () => console.log('listening'));
process.on('SIGTERM', () => {
  server.close();
  client.disconnect();
});
