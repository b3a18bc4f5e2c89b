"""Rules and windows through the ASGI middleware on a real server: matching by path
template, method, host, header and tier; several windows (the longer refuses once the
shorter has refilled); one atomic decision across rules and dimensions."""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional

import pytest
import redis

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from redis_rl import Limiter
from redis_rl.asgi import RateLimitMiddleware

from conftest import PATIENT


async def ok(request: Request) -> JSONResponse:
    return JSONResponse({"path": request.url.path})


@pytest.fixture
def r(server) -> Iterator[redis.Redis]:
    c = redis.Redis(port=server.port, decode_responses=True)
    yield c
    c.close()


def client(server: Any, config: Dict[str, Any], **options: Any) -> TestClient:
    routes = [Route("/login", ok, methods=["GET", "POST"]), Route("/api/items/{id}", ok), Route("/other", ok)]
    app = Starlette(routes=routes, middleware=[
        Middleware(RateLimitMiddleware, redis_url=server.url, config=config, **{"timeout": PATIENT, **options})])
    return TestClient(app)


def rule(prefix: str, dimensions: Optional[list] = None, **fields: Any) -> Dict[str, Any]:
    return {"key_prefix": prefix, "dimensions": dimensions or [], "hot": [], "rules": [{"name": "r", **fields}]}


def test_rules_match_by_template_method_host_header_and_tier(server, prefix):
    config = rule(prefix, paths=["/api/items/{id}"], methods=["GET"], hosts=["api.example.com"],
                  headers={"x-client": "mobile"}, tiers=["pro"], key=["global"], limit=1, window_ms=3_600_000)
    match = {"host": "api.example.com", "x-client": "mobile", "x-api-key": "pro-key"}
    with client(server, config, tiers={"pro-key": "pro", "free-key": "free"}) as c:
        assert c.get("/api/items/1", headers=match).status_code == 200
        assert c.get("/api/items/2/", headers=match).status_code == 429, "same template, normal form"
        for headers in (
            {**match, "host": "www.example.com"},
            {**match, "x-client": "web"},
            {**match, "x-api-key": "free-key"},
            {"host": "api.example.com", "x-client": "mobile"},
        ):
            res = c.get("/api/items/1", headers=headers)
            assert res.status_code == 200 and "ratelimit" not in res.headers, headers
        assert c.get("/other", headers=match).status_code == 200
        assert c.post("/login", headers=match).status_code == 200


def test_the_longer_window_refuses_after_the_shorter_refilled(server, prefix, r):
    # Windows far longer than the test (a short one of 200 ms filled and refilled as the
    # calls of a loaded machine pleased): the short window's refill is its key's expiry,
    # which a missing key stands for exactly (no deny cache to remember the refusal).
    config = rule(prefix, key=["ip"], paths=["/login"], limits=["2/minute", "3/hour"])
    short = f"{prefix}:{{ip:unknown}}:r:r:1m"
    limiter = Limiter.from_url(server.url, timeout=PATIENT, deny_cache=0)
    with client(server, config, limiter=limiter) as c:
        assert [c.post("/login").status_code for _ in range(3)] == [200, 200, 429]
        assert c.post("/login").headers.get("ratelimit", "").startswith('"r-1m"')
        assert r.delete(short) == 1  # the short window is empty again
        assert c.post("/login").status_code == 200
        refused = c.post("/login")
        assert refused.status_code == 429
        assert refused.json()["policy"] == "r-1h" and refused.json()["dimension"] == "r"
        assert refused.headers["ratelimit-policy"] == '"r-1m";q=2;w=60, "r-1h";q=3;w=3600'
    assert r.exists(short, f"{prefix}:{{ip:unknown}}:r:r:1h") == 2


def test_a_request_refused_by_a_rule_consumes_nothing_elsewhere(server, prefix):
    config = rule(prefix, dimensions=["ip"], key=["ip"], paths=["/login"], limit=1, window_ms=3_600_000)
    config["ip"] = {"limit": 10}
    with client(server, config) as c:
        assert c.post("/login").status_code == 200
        for _ in range(3):
            assert c.post("/login").status_code == 429
        res = c.get("/other")
        # One request counted on the ip dimension before this one: the refusals took nothing.
        assert res.headers["ratelimit"] == '"ip";r=8;t=60'


def test_a_log_share_above_the_registrys_bound_runs_as_a_sliding_window():
    from redis_rl._core import Params

    # As the Rust fallback: an exact log up to 64 units per instance, a sliding window above
    # (one instance included).
    def share(limit: int, instances: int) -> str:
        return Params("log", [limit, 1000]).share(instances).algorithm

    assert share(64, 1) == "log"
    assert share(65, 1) == "sliding"
    assert share(200, 2) == "sliding"
    assert share(128, 2) == "log"
