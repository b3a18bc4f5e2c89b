"""The smoke test of the release artifacts (make test-dist), run by the Python of a fresh
virtual environment that has only the wheel of dist/ installed and no Rust toolchain on PATH:
the module from its tarball serves the package's calls, and the package's own core (the
compiled extension) decides when Redis is away. Usage: dist_smoke.py <redis port>"""

import asyncio
import shutil
import sys

import redis_rl
from redis_rl import Limiter, Policy, SyncLimiter

assert shutil.which("cargo") is None and shutil.which("rustc") is None, "Rust is on PATH"
assert "site-packages" in redis_rl.__file__, f"redis_rl imported from {redis_rl.__file__}"
port = int(sys.argv[1])
url = f"redis://127.0.0.1:{port}/0"
bucket = Policy.token_bucket(3, 3, 60_000)

sync = SyncLimiter.from_url(url)
decisions = [sync.check("smoke:sync", bucket) for _ in range(4)]
assert [d.allowed for d in decisions] == [True, True, True, False], decisions
assert decisions[-1].source == "redis" and decisions[-1].retry_after_ms > 0, decisions[-1]


async def main():
    limiter = Limiter.from_url(url)
    d = await limiter.check("smoke:async", Policy.gcra(10, 1000), cost=2)
    assert d.allowed and d.remaining == 8 and d.source == "redis", d
    await limiter.aclose()
    # Nothing listens on port 1: the local fallback (the extension's core) decides.
    away = Limiter.from_url("redis://127.0.0.1:1/0")
    local = Policy.sliding(2, 60_000).on_failure("local")
    got = [await away.check("smoke:local", local) for _ in range(3)]
    assert [d.allowed for d in got] == [True, True, False], got
    assert {d.source for d in got} == {"local"}, got
    await away.aclose()


asyncio.run(main())
try:
    Policy.token_bucket(0, 1, 1000)
except ValueError as e:
    assert str(e) == "capacity must be an integer between 1 and 1000000000000000", e
else:
    raise AssertionError("a zero capacity was accepted")
print(f"dist smoke: redis_rl from the wheel works against the module on port {port}")
