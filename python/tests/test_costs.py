"""Keys of different costs checked together (``check_all`` with one cost per item, as the
ASGI middleware's rule ``cost`` headers ask): one atomic call on the module and on the Lua
twin, each key its own cost; a refusal takes nothing anywhere and gives nothing back."""

from __future__ import annotations

import asyncio
from typing import Any, Dict

import pytest
import redis

from redis_rl import Policy, SyncLimiter

from conftest import PATIENT, patient_limiter


def calls(port: int) -> Dict[str, int]:
    """Calls so far by command (``INFO commandstats``, lower case)."""
    stats: Dict[str, Any] = redis.Redis(port=port).info("commandstats")
    return {name.lower(): int(v["calls"]) for name, v in stats.items()}


def spent(before: Dict[str, int], after: Dict[str, int], command: str) -> int:
    return after.get(f"cmdstat_{command}", 0) - before.get(f"cmdstat_{command}", 0)


@pytest.mark.parametrize("where", ["module", "twin"])
def test_different_costs_are_one_atomic_call(server, bare_server, prefix, where):
    port = server.port if where == "module" else bare_server.port
    decides_with = "rl.all" if where == "module" else "evalsha"
    tag = "{" + prefix + "}"
    sliding = Policy.sliding(10, 3_600_000)
    fixed = Policy.fixed(3, 10**12)  # fixed windows turn on the clock: none does during the test
    items = [(f"{tag}:a", sliding), (f"{tag}:b", fixed)]

    async def main() -> None:
        lim = patient_limiter(port, deny_cache=0)
        try:
            ok = await lim.check_all(items, [2, 1])
            assert ok.allowed and [d.remaining for d in ok.decisions] == [8, 2]
            # b has 2 left: its 5 refuses the request, a's 2 are not taken, in one call.
            before = calls(port)
            refused = await lim.check_all(items, [2, 5])
            after = calls(port)
            assert refused.denied_index == 1
            assert refused.decisions[0].remaining == 8
            assert (spent(before, after, decides_with), spent(before, after, "rl.refund")) == (1, 0)
            assert (await lim.peek(f"{tag}:a", sliding, 0)).remaining == 8
            with pytest.raises(ValueError, match="one cost per item"):
                await lim.check_all(items, [1])
        finally:
            await lim.aclose()

    asyncio.run(main())
    # The blocking limiter takes the same costs.
    sync = SyncLimiter(redis.Redis(port=port), deny_cache=0)
    try:
        md = sync.check_all(items, [0, 2])
        assert md.allowed and [d.remaining for d in md.decisions] == [8, 0]
    finally:
        sync.close()


def test_the_asgi_middlewares_rule_costs_are_one_atomic_call(server, prefix):
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from redis_rl.asgi import RateLimitMiddleware

    def rule(name: str, limit: str, header: str) -> Dict[str, Any]:
        return {"name": name, "key": ["global"], "limits": [limit], "algorithm": "fixed", "cost": header}

    config = {
        "key_prefix": prefix,
        "dimensions": ["ip"],
        "ip": {"limit": 1000},
        "rules": [rule("tokens", "1000/hour", "header:X-Tokens"), rule("images", "10/hour", "header:X-Images")],
    }

    async def ok(_: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = Starlette(
        routes=[Route("/x", ok)],
        middleware=[Middleware(RateLimitMiddleware, redis_url=server.url, config=config, timeout=PATIENT)],
    )
    r = redis.Redis(port=server.port)
    tokens = f"{prefix}:{{global}}:r:tokens"
    with TestClient(app) as client:

        def send(n_tokens: str, n_images: str) -> int:
            return client.get("/x", headers={"x-tokens": n_tokens, "x-images": n_images}).status_code

        assert send("5", "4") == 200
        # images has 6 left: its 20 refuses the request; the tokens' 7 and the ip's 1 are not
        # taken, in one call.
        before = calls(server.port)
        assert send("7", "20") == 429
        after = calls(server.port)
        assert (spent(before, after, "rl.all"), spent(before, after, "rl.refund")) == (1, 0)
        assert int(r.execute_command("RL.FIXED", tokens, 1000, 3_600_000, "COST", 0)[2]) == 995
        assert send("7", "6") == 200
