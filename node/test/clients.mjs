// Every client library the package supports, standalone and cluster: `make(port)` gives a
// connected client, `close(client)` ends it.
import IORedis from 'ioredis';
import IOValkey from 'iovalkey';
import { createClient, createCluster } from 'redis';

const host = '127.0.0.1';

export const standalone = [
  {
    name: 'ioredis',
    make: async (port) => new IORedis(port, host, { maxRetriesPerRequest: 1 }),
    close: (c) => c.disconnect(),
  },
  {
    name: 'iovalkey',
    make: async (port) => new IOValkey(port, host, { maxRetriesPerRequest: 1 }),
    close: (c) => c.disconnect(),
  },
  {
    name: 'node-redis RESP3',
    make: async (port) => createClient({ url: `redis://${host}:${port}`, RESP: 3 }).connect(),
    close: (c) => c.destroy(),
  },
  {
    name: 'node-redis RESP2',
    make: async (port) => createClient({ url: `redis://${host}:${port}`, RESP: 2 }).connect(),
    close: (c) => c.destroy(),
  },
];

export const clusters = [
  {
    name: 'ioredis cluster',
    make: async (port) => {
      const c = new IORedis.Cluster([{ host, port }]);
      await new Promise((resolve, reject) => {
        c.once('ready', resolve);
        c.once('error', reject);
      });
      return c;
    },
    close: (c) => c.disconnect(),
  },
  {
    name: 'iovalkey cluster',
    make: async (port) => {
      const c = new IOValkey.Cluster([{ host, port }]);
      await new Promise((resolve, reject) => {
        c.once('ready', resolve);
        c.once('error', reject);
      });
      return c;
    },
    close: (c) => c.disconnect(),
  },
  {
    name: 'node-redis cluster',
    make: async (port) => createCluster({ rootNodes: [{ url: `redis://${host}:${port}` }] }).connect(),
    close: (c) => c.destroy(),
  },
];
