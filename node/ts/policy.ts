// Policies: a rate limiter of the core's registry with its parameters, validated by the core
// (the server's ranges and error texts). The named constructors are generated from the
// registry the addon exports, so an algorithm added to the core needs no change here.
import native from './load.js';
import type { Policy } from './load.js';

export type { Policy };

interface NumberSpec {
  name: string;
  spelling?: 'offset' | 'words';
  bias?: number;
  words?: string[];
}

interface RegistryEntry {
  config_name: string;
  limiter: boolean;
  params: NumberSpec[];
  options: NumberSpec[];
}

/** A number as the core carries it: a word (`DAY`) as its position from 1, an offset
 * (a signed number) plus its bias; anything else as given (the core checks the range). */
function carried(spec: NumberSpec, value: unknown): number {
  if (spec.spelling === 'words' && typeof value === 'string') {
    const at = (spec.words ?? []).indexOf(value.toUpperCase());
    if (at < 0) throw new RangeError(`${spec.name} must be ${(spec.words ?? []).join(', ')}, not ${value}`);
    return at + 1;
  }
  if (typeof value !== 'number') throw new TypeError(`${spec.name} must be a number, not ${typeof value}`);
  return spec.spelling === 'offset' ? value + (spec.bias ?? 0) : value;
}

const registry = JSON.parse(native.registryJson()) as { algorithms: RegistryEntry[] };

/** Options of a constructor by name (`{ burst: 2 }`). */
export type PolicyOptions = Record<string, number | string | null | undefined>;

type Constructor = (...numbers: (number | string | PolicyOptions | undefined)[]) => Policy;

/** `token_bucket` -> `tokenBucket`. */
function camel(name: string): string {
  return name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

function constructorOf(entry: RegistryEntry): Constructor {
  return (...numbers) => {
    const last = numbers[numbers.length - 1];
    const named = typeof last === 'object' && last !== null ? (numbers.pop() as PolicyOptions) : {};
    const values = numbers.slice(0, entry.params.length).map((v, i) => carried(entry.params[i], v));
    const given = numbers.slice(entry.params.length);
    const options = entry.options.map((o, i) => {
      const v = named[o.name] ?? given[i];
      return v === undefined || v === null ? null : carried(o, v);
    });
    for (const name of Object.keys(named)) {
      if (!entry.options.some((o) => o.name === name)) {
        throw new TypeError(`${camel(entry.config_name)}() got an unexpected option ${JSON.stringify(name)}`);
      }
    }
    return native.Policy.of(entry.config_name, values, options);
  };
}

/**
 * Policy constructors, one per rate limiter of the registry, parameters in the command's
 * order and options last (`policies.gcra(10, 1000, { burst: 2 })`); `of` by config name and
 * `fromRate` for a configured rate (`limit` per `windowMs`, `burst`). Invalid numbers throw
 * with the server's text (`capacity must be an integer between 1 and 1000000000000000`).
 */
export interface Policies {
  tokenBucket(capacity: number, refillTokens: number, refillMs: number): Policy;
  sliding(limit: number, windowMs: number): Policy;
  fixed(limit: number, windowMs: number): Policy;
  gcra(limit: number, periodMs: number, options?: { burst?: number } | number): Policy;
  log(limit: number, windowMs: number): Policy;
  quota(limit: number, period: 'DAY' | 'WEEK' | 'MONTH' | string, options?: { tz?: number; anchor?: number }): Policy;
  of(algorithm: string, ...numbers: (number | string | PolicyOptions)[]): Policy;
  fromRate(algorithm: string, limit: number, windowMs: number, burst?: number): Policy;
  [algorithm: string]: (...args: never[]) => Policy;
}

const built: Record<string, unknown> = {
  of: (algorithm: string, ...numbers: (number | string | PolicyOptions)[]) => {
    const entry = registry.algorithms.find((a) => a.config_name === algorithm && a.limiter);
    if (!entry) return native.Policy.of(algorithm, [], []); // the addon names the known ones
    return constructorOf(entry)(...numbers);
  },
  fromRate: (algorithm: string, limit: number, windowMs: number, burst?: number) =>
    native.Policy.fromRate(algorithm, limit, windowMs, burst),
};
for (const entry of registry.algorithms) {
  if (entry.limiter) built[camel(entry.config_name)] = constructorOf(entry);
}

export const policies = built as unknown as Policies;
export const PolicyClass = native.Policy;
