"""The ASGI middleware through Starlette's and FastAPI's test clients, on a real server:
limits, headers, 429 bodies, request ids, route templates, tiers and failure modes."""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

import pytest
import redis
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from redis_rl import BreakerConfig
from redis_rl.asgi import ConfigError, RateLimitMiddleware, load_engine, tenant_id

from conftest import PATIENT

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


async def echo(request: Request) -> JSONResponse:
    return JSONResponse({"path": request.url.path, "request_id": request.headers.get("x-request-id")})


def starlette_app(**options: Any) -> Starlette:
    """The test app behind the middleware built with ``options`` (the tests' timeout unless
    they give one)."""
    options.setdefault("timeout", PATIENT)
    api = [Route("/users/{user_id}", echo)]
    routes = [Route("/items/{item_id}", echo), Route("/search", echo), Mount("/api", routes=api), Route("/healthz", echo)]
    return Starlette(routes=routes, middleware=[Middleware(RateLimitMiddleware, **options)])


@pytest.fixture
def r(server) -> Iterator[redis.Redis]:
    c = redis.Redis(port=server.port, decode_responses=True)
    yield c
    c.close()


def test_allowed_responses_carry_the_gateways_headers(server, prefix, r):
    app = starlette_app(redis_url=server.url, config={"key_prefix": prefix})
    with TestClient(app) as client:
        res = client.get("/items/42", headers={"X-Request-Id": "req-1:a.b_c"})
    assert res.status_code == 200
    assert res.json() == {"path": "/items/42", "request_id": "req-1:a.b_c"}
    h = res.headers
    # Defaults: ip 100/min and endpoint 100/min (sliding), global 100000/min; the most
    # restrictive is the first with the fewest left: ip.
    assert (h["x-ratelimit-limit"], h["x-ratelimit-remaining"]) == ("100", "99")
    # t: a sliding window is idle only after two windows, but t never exceeds w.
    assert h["x-ratelimit-reset"] == "60"
    assert h["ratelimit-policy"] == '"ip";q=100;w=60, "endpoint";q=100;w=60, "global";q=100000;w=60'
    assert h["ratelimit"] == '"ip";r=99;t=60'
    assert h["x-request-id"] == "req-1:a.b_c"
    # The design's four dimensions, in one slot per owner: keys as rl-gateway writes them.
    assert r.exists(f"{prefix}:{{ip:unknown}}", f"{prefix}:{{ip:unknown}}:ep:/items/{{item_id}}", f"{prefix}:{{global}}") == 3


def test_a_denied_request_gets_429_problem_json_with_retry_after(server, prefix):
    config = {"key_prefix": prefix, "ip": {"limit": 3, "algorithm": "fixed", "window_ms": 3_600_000}}
    app = starlette_app(redis_url=server.url, config=config)
    with TestClient(app) as client:
        ok = [client.get("/search").status_code for _ in range(3)]
        res = client.get("/search", headers={"X-Request-Id": "bad id with spaces"})
    assert ok == [200, 200, 200]
    assert res.status_code == 429
    assert res.headers["content-type"] == "application/problem+json"
    rid = res.headers["x-request-id"]
    assert UUID.match(rid), rid  # an insane id is replaced
    retry = int(res.headers["retry-after"])
    assert 1 <= retry <= 3600
    body = res.json()
    assert body == {
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": f"rate limit exceeded on dimension 'ip' (3 per 3600 s); retry after {retry} s",
        "dimension": "ip",
        "policy": "ip",
        "request_id": rid,
        "limit": 3,
        "retry_after": retry,
        "trace_id": body["trace_id"],
    }
    assert len(body["trace_id"]) == 32  # no traceparent came: a new trace
    # Byte for byte as serde_json writes it: compact, keys in order.
    assert res.content == json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    assert res.headers["ratelimit-policy"] == '"ip";q=3;w=3600, "endpoint";q=100;w=60, "global";q=100000;w=60'
    assert res.headers["x-ratelimit-remaining"] == "0"
    assert res.headers["ratelimit"] == f'"ip";r=0;t={retry}' and res.headers["x-ratelimit-reset"] == str(retry)


def test_endpoints_are_route_templates_not_raw_paths(server, prefix, r):
    config = {"key_prefix": prefix, "dimensions": ["endpoint"], "endpoint": {"limit": 2, "algorithm": "sliding"}}
    app = starlette_app(redis_url=server.url, config=config)
    with TestClient(app) as client:
        codes = [client.get(f"/items/{i}").status_code for i in range(3)]
        mounted = [client.get(f"/api/users/{i}").status_code for i in range(3)]
        other = client.get("/nope/1")
    assert codes == [200, 200, 429] and mounted == [200, 200, 429]
    assert other.status_code == 404 and other.headers["ratelimit-policy"] == '"endpoint";q=2;w=60'
    # The fleet key is the membership's (on by default, renewed off the requests' path).
    keys = sorted(k for k in r.keys(f"{prefix}:*") if k != f"{prefix}:{{fleet}}")
    assert keys == [
        f"{prefix}:{{ip:unknown}}:ep:/api/users/{{user_id}}",
        f"{prefix}:{{ip:unknown}}:ep:/items/{{item_id}}",
        f"{prefix}:{{ip:unknown}}:ep:<unmatched>",
    ]


def test_fastapi_add_middleware_and_tiers_from_the_redis_hash(server, prefix, r):
    app = FastAPI()

    @app.get("/items/{item_id}")
    async def item(item_id: int) -> dict:
        return {"item": item_id}

    config = {
        "key_prefix": prefix,
        "dimensions": ["api_key", "endpoint"],
        "tiers": {"free": {"limit": 1, "window_ms": 3_600_000}, "pro": {"limit": 3, "window_ms": 3_600_000}},
    }
    app.add_middleware(RateLimitMiddleware, redis_url=server.url, config=config, tier_hash=f"{prefix}:tiers",
                       timeout=PATIENT)
    r.hset(f"{prefix}:tiers", "pro-key", "pro")
    with TestClient(app) as client:
        pro = [client.get(f"/items/{i}", headers={"X-API-Key": "pro-key"}).status_code for i in range(4)]
        free = [client.get("/items/1", headers={"X-API-Key": "free-key"}).status_code for _ in range(2)]
        denied = client.get("/items/9", headers={"X-API-Key": "pro-key"})
    assert pro == [200, 200, 200, 429] and free == [200, 429]
    assert denied.json()["dimension"] == "api_key" and denied.json()["limit"] == 3
    tenant = tenant_id("pro-key")
    assert r.exists(f"{prefix}:{{k:{tenant}}}:key", f"{prefix}:{{k:{tenant}}}:ep:/items/{{item_id}}") == 2
    assert "pro-key" not in " ".join(r.keys(f"{prefix}:{{*"))  # the raw key is never a key


def test_a_secret_keys_api_key_digests_as_the_gateway_does(server, prefix, r, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef0123456789abcdef\n")
    keyed = {"key_prefix": prefix, "dimensions": ["api_key"], "api_key_digest_secret_file": str(secret)}
    engine = load_engine(keyed)
    # Computed apart: HMAC-SHA256 under HMAC(secret, "redis-rl api-key digest v1"); the
    # gateway's test pins the same value for the same secret.
    assert engine.key_digest_is_keyed and engine.tenant_id("bob") == "4eb40ca3aff1ae55"
    assert tenant_id("bob") == "81b637d8fcd2c6da"  # unkeyed SHA-256: the names without a secret
    with TestClient(starlette_app(redis_url=server.url, config=keyed)) as client:
        assert client.get("/search", headers={"X-API-Key": "bob"}).status_code == 200
    assert r.exists(f"{prefix}:{{k:4eb40ca3aff1ae55}}:key") == 1
    assert r.exists(f"{prefix}:{{k:81b637d8fcd2c6da}}:key") == 0
    # Without a secret, the old names stay.
    unkeyed = {"key_prefix": f"{prefix}u", "dimensions": ["api_key"]}
    assert not load_engine(unkeyed).key_digest_is_keyed
    with TestClient(starlette_app(redis_url=server.url, config=unkeyed)) as client:
        assert client.get("/search", headers={"X-API-Key": "bob"}).status_code == 200
    assert r.exists(f"{prefix}u:{{k:81b637d8fcd2c6da}}:key") == 1
    # A short secret is refused at load, naming the field.
    secret.write_text("short")
    with pytest.raises(ConfigError, match="api_key_digest_secret_file: .*5 bytes, at least 32"):
        load_engine(keyed)


def test_tiers_mapping_shadow_and_excluded_paths(server, prefix):
    config = {
        "key_prefix": prefix,
        "dimensions": ["api_key", "global"],
        "tiers": {"free": {"limit": 1}, "gold": {"limit": 1, "shadow": True}},
        "global": {"limit": 100000, "algorithm": "sliding"},
    }
    app = starlette_app(redis_url=server.url, config=config, tiers={"g": "gold"}, exclude_paths=["/healthz"])
    with TestClient(app) as client:
        shadowed = [client.get("/search", headers={"X-API-Key": "g"}).status_code for _ in range(3)]
        health = client.get("/healthz")
    assert shadowed == [200, 200, 200]
    assert "x-ratelimit-limit" not in health.headers


def test_toml_config_file_and_errors(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text(
        'key_prefix = "gw"\nfailure_mode = "closed"\ninstances = 2\ntrusted_proxies = ["10.0.0.0/8"]\n'
        'dimensions = ["ip", "global"]\n[tiers.free]\nlimit = 5\n[ip]\nlimit = 7\nalgorithm = "gcra"\nburst = 3\n'
    )
    e = load_engine(path)
    assert (e.key_prefix, e.failure_mode, e.instances) == ("gw", "closed", 2)
    assert '"ip" 7/1m gcra burst 3' in e.explain()
    # rl-gateway's fleet keys are read and checked (one TOML for both), not used here.
    load_engine({"hot": ["global", "ip"], "fleet": {"membership": False}, "leases": {"lifetime_ms": 100}})
    for text, message in [
        ("colour = 1", "f.toml:1: colour: unknown field `colour`"),
        ("\n[ip]\nlimit = 0", "f.toml:3: ip.limit: invalid policy: limit must be an integer between 1 and 1000000000000000"),
        ("[ip]\nlimit = 5\nwindow_ms = 0", "f.toml:3: ip.window_ms: invalid policy: window_ms must be an integer between 1"),
        ("[tiers.x]\nlimit = 5", 'f.toml: default_tier: default_tier "free" is not among the tiers'),
        ('[tiers.free]\nlimit = 20000\nalgorithm = "log"', "f.toml:2: tiers.free.limit: invalid policy: limit must be an integer between 1 and 10000"),
        ('key_prefix = "a{b}"', "f.toml:1: key_prefix: key_prefix must be non-empty and must not contain braces"),
        ('dimensions = ["apikey"]', "f.toml:1: dimensions: unknown variant `apikey`"),
        ("[ip]\nlimit = 5\nspeed = 1", "f.toml:3: ip.speed: unknown field `speed`"),
        ("[fleet]\nbeat = 1", "f.toml:2: fleet.beat: unknown field `beat`"),
        ("limit = ", "f.toml:1: limit: invalid TOML syntax"),
    ]:
        bad = tmp_path / "f.toml"
        bad.write_text(text)
        with pytest.raises(ConfigError) as caught:
            load_engine(bad)
        assert str(caught.value).replace(str(tmp_path) + "/", "").startswith(message), (text, str(caught.value))
    with pytest.raises(ConfigError, match=re.escape("<mapping>:1: invalid policy: limit must be")):
        load_engine({"ip": {"limit": 0}})


def test_a_bad_file_fails_the_application_start_naming_the_location(tmp_path):
    path = tmp_path / "rl.toml"
    path.write_text('[[rules]]\nname = "login"\nkey = ["ip"]\nlimits = ["5/fortnight"]\n')
    app = starlette_app(redis_url="redis://127.0.0.1:1/0", config=path)
    with pytest.raises(Exception) as caught:
        with TestClient(app):
            pass
    assert f'{path}:4: rules[0].limits: "5/fortnight": unknown unit `fortnight`' in str(caught.value)


def test_redis_killed_mid_run_no_5xx_and_local_limits(own_server, prefix):
    config = {"key_prefix": prefix, "dimensions": ["ip"], "ip": {"limit": 4, "algorithm": "fixed", "window_ms": 3_600_000}}
    app = starlette_app(redis_url=own_server.url, config=config, breaker=BreakerConfig(2, 60.0))
    with TestClient(app) as client:
        before = [client.get("/search").status_code for _ in range(2)]
        own_server.kill()
        during = [client.get("/search") for _ in range(8)]
    assert before == [200, 200]
    assert all(res.status_code < 500 for res in during)
    # The local store starts from idle: the limit again, then 429 with the core's wait.
    assert [res.status_code for res in during] == [200] * 4 + [429] * 4
    assert during[-1].json()["dimension"] == "ip" and int(during[-1].headers["retry-after"]) >= 1


def test_fail_closed_answers_503(own_server, prefix):
    config = {"key_prefix": prefix, "failure_mode": "closed", "dimensions": ["ip"]}
    app = starlette_app(redis_url=own_server.url, config=config, breaker=BreakerConfig(1, 60.0))
    with TestClient(app) as client:
        own_server.kill()
        res = client.get("/search")
    assert res.status_code == 503
    assert res.json()["title"] == "Rate limiter unavailable"
    assert int(res.headers["retry-after"]) >= 1


def test_middleware_needs_a_redis_url_or_limiter():
    with pytest.raises(ValueError, match="needs redis_url or limiter"):
        RateLimitMiddleware(lambda s, r, se: None)
