"""The ASGI middleware at parity with the Rust middleware: per-tier overrides of
every dimension, draft-11 headers, identity (API key header, IPv6 networks, tier caches),
access lists, and rl-gateway's fleet keys. Expected values are the Rust tests' literals
(middleware/src/{config,headers,extract,access,service}.rs); the last test runs the
real rl-gateway next to the middleware and compares what both write."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
import redis
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from redis_rl import Limiter
from redis_rl._core import Admitted, PolicyEngine, Refusal
from redis_rl.asgi import RateLimitMiddleware, RedisHashTiers, load_engine, tenant_id

from conftest import PATIENT, ROOT, free_port

QUOTA_HEADERS = ("ratelimit", "ratelimit-policy", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")


async def ok(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


class Peer:
    """Sets the ASGI peer address from the test-only header ``x-test-peer`` (any Starlette
    version: TestClient's own ``client=`` is recent)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = scope.get("headers") or []
            peer = [v.decode() for n, v in headers if n == b"x-test-peer"]
            if peer:
                rest = [(n, v) for n, v in headers if n != b"x-test-peer"]
                scope = {**scope, "client": (peer[0], 4000), "headers": rest}
        await self.app(scope, receive, send)


def app(**options: Any) -> Starlette:
    """The test app behind the middleware built with ``options`` (the tests' timeout unless
    they give one)."""
    options.setdefault("timeout", PATIENT)
    routes = [Route("/api/items/{id}", ok, methods=["GET", "POST"]), Route("/api/search", ok), Route("/items/{id}", ok),
              Route("/other", ok), Route("/login", ok, methods=["POST"])]
    return Starlette(routes=routes, middleware=[Middleware(Peer), Middleware(RateLimitMiddleware, **options)])


def get(client: TestClient, path: str, ip: str, key: Optional[str] = None, **headers: str) -> Any:
    h = {"x-test-peer": ip, **{k.replace("_", "-"): v for k, v in headers.items()}}
    if key is not None:
        h["x-api-key"] = key
    return client.get(path, headers=h)


@pytest.fixture
def r(server) -> Iterator[redis.Redis]:
    c = redis.Redis(port=server.port, decode_responses=True)
    yield c
    c.close()


def closed_port_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"  # nothing listens: every call fails at once


# -- 1. per-tier overrides of every dimension ------------------------------------------------


def test_tier_overrides_parse_as_rust_and_keep_the_algorithm():
    e = load_engine({
        "api_key_header": "Authorization", "ipv6_prefix": 56,
        "tiers": {"free": {"limit": 100}, "pro": {
            "limit": 1000, "endpoint": {"limit": 1000}, "ip": {"limit": 500, "window_ms": 1000},
            "global": {"algorithm": "gcra"},
        }},
        "ip": {"limit": 50},
    })
    text = e.explain()
    for expected in [
        'ip        key rl:{ip:<client>}: "ip" 50/1m sliding',  # [ip] limit = 50 stays a sliding window
        'endpoint  key rl:{k:<tenant>}:ep:<route> (rl:{ip:<client>}:ep:<route> without a key): "endpoint" 100/1m sliding',
        'tier pro: "api_key" 1000/1m token_bucket',
        'tier pro, endpoint: "endpoint" 1000/1m sliding',
        'tier pro, ip: "ip" 500/1s sliding',
        'tier pro, global: "global" 100000/1m gcra',
    ]:
        assert expected in text, (expected, text)
    assert "tier free," not in text
    for text, message in [
        ("[tiers.free]\nlimit = 1\n[tiers.free.ip]\nlimit = 0", "<t>:4: tiers.free.ip.limit: invalid policy: limit must be"),
        ("[tiers.free]\nlimit = 1\n[tiers.free.api]\nlimit = 1", "unknown field `api`"),
        ("[tiers.free]\nlimit = 1\n[tiers.free.endpoint]\nlimt = 1", "<t>:4: tiers.free.endpoint.limt: unknown field `limt`"),
        ("ipv6_prefix = 0", "ipv6_prefix must be between 1 and 128"),
        ("ipv6_prefix = 129", "ipv6_prefix must be between 1 and 128"),
        ('api_key_header = "x key"', 'api_key_header "x key" is not a valid'),
        ('[access]\nallow_ips = ["10.0.0.0/33"]', "invalid IP"),
        ('[access]\ndeny_api_keys = [""]', "access: API keys must be non-empty"),
        ('[access]\ndeny_api_keys = ["a b"]', "access: API keys must be non-empty, without spaces"),
        ("[access]\nallow = []", "unknown field `allow`"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            PolicyEngine.from_toml(text, "<t>")


def test_tiers_override_every_dimension_in_keys_of_their_own(server, prefix, r, tmp_path):
    # The configuration middleware/tests/live/policy.rs reads too.
    text = (ROOT / "testdata" / "flow" / "tier_overrides.toml").read_text()
    config = write(tmp_path / "tiers.toml", f'key_prefix = "{prefix}"\n{text}')
    with TestClient(app(redis_url=server.url, config=config, tiers={"pro-key": "pro"})) as client:
        free_responses = [get(client, "/items/1", "192.0.2.20", "free-key") for _ in range(8)]
        pro = [get(client, "/items/1", "192.0.2.21", "pro-key").status_code for _ in range(8)]
        pro_ip = [get(client, f"/items/{i}", "192.0.2.22", "pro-key").status_code for i in range(8)]
        last = get(client, "/other", "192.0.2.22", "pro-key")
    free = [f.status_code for f in free_responses]
    assert free.count(200) == 2, "free: the [ip] table, an address's budget shared with key-less traffic"
    assert free_responses[0].headers["ratelimit-policy"] == (
        '"api_key";q=100;w=60, "ip";q=2;w=3600, "endpoint";q=3;w=3600, "global";q=100000;w=60'
    ), "free: the [endpoint] and [ip] tables"
    assert pro.count(200) == 5, "pro: [tiers.pro.endpoint]"
    # Another address: the pro key's endpoint budget is spent, its own ip budget is 6.
    assert pro_ip == [429] * 8
    assert last.status_code == 200 and last.headers["ratelimit-policy"] == (
        '"api_key";q=1000;w=60, "ip";q=6;w=3600, "endpoint";q=5;w=3600, "global";q=50000;w=60'
    )
    pro_t, free_t = tenant_id("pro-key"), tenant_id("free-key")
    assert r.exists(
        f"{prefix}:{{ip:192.0.2.20}}",  # free keys share the address's budget
        f"{prefix}:{{ip:192.0.2.21}}:tier:pro",  # pro keys have their own
        f"{prefix}:{{global}}",
        f"{prefix}:{{global}}:tier:pro",
        f"{prefix}:{{k:{pro_t}}}:ep:/items/{{id}}",
        f"{prefix}:{{k:{free_t}}}:key",
    ) == 6
    assert not r.exists(f"{prefix}:{{ip:192.0.2.21}}"), "pro traffic does not spend the key-less budget"


# -- 2. draft-11 headers ----------------------------------------------------------------------


def test_headers_list_every_policy_and_t_is_the_true_wait(server, prefix):
    # The Rust service test's scenarios and literals.
    with TestClient(app(redis_url=server.url, config={"key_prefix": prefix})) as client:
        res = get(client, "/items/7", "192.0.2.1", "k1")
    h = res.headers
    assert (h["x-ratelimit-limit"], h["x-ratelimit-remaining"], h["x-ratelimit-reset"]) == ("100", "99", "60")
    assert h["ratelimit-policy"] == (
        '"api_key";q=100;w=60, "ip";q=100;w=60, "endpoint";q=100;w=60, "global";q=100000;w=60'
    )
    assert h["ratelimit"] == '"ip";r=99;t=60'

    config = {"key_prefix": prefix, "ip": {"limit": 2, "algorithm": "token_bucket"}}
    with TestClient(app(redis_url=server.url, config=config)) as client:
        codes = [get(client, "/other", "192.0.2.2").status_code for _ in range(2)]
        res = get(client, "/other", "192.0.2.2", x_request_id="abc-1")
    assert codes == [200, 200] and res.status_code == 429
    h = res.headers
    # 2 tokens per minute: the next one in 30 s, not the 60 s window.
    assert (h["retry-after"], h["x-ratelimit-reset"], h["x-ratelimit-remaining"]) == ("30", "30", "0")
    assert h["ratelimit"] == '"ip";r=0;t=30'
    assert h["ratelimit-policy"] == '"ip";q=2;w=60, "endpoint";q=100;w=60, "global";q=100000;w=60'
    assert res.content == json.dumps(
        {
            "detail": "rate limit exceeded on dimension 'ip' (2 per 60 s); retry after 30 s",
            "dimension": "ip", "limit": 2, "policy": "ip", "request_id": "abc-1", "retry_after": 30, "status": 429,
            "title": "Too Many Requests", "trace_id": res.json()["trace_id"], "type": "about:blank",
        },
        separators=(",", ":"),
    ).encode()

    # The report: a sliding window of an hour said Retry-After 32 but t=3596.
    config = {"key_prefix": prefix, "dimensions": ["ip"], "ip": {"limit": 2, "window_ms": 3_600_000}}
    with TestClient(app(redis_url=server.url, config=config)) as client:
        [get(client, "/other", "192.0.2.3") for _ in range(2)]
        res = get(client, "/other", "192.0.2.3")
    t = res.headers["retry-after"]
    assert res.headers["ratelimit"] == f'"ip";r=0;t={t}' and res.headers["x-ratelimit-reset"] == t
    # At most w + w/limit: a sliding window's one case above w (README's table).
    assert 1 <= int(t) <= 3600 + 3600 // 2

    # GCRA: q is the burst, w the time to refill it (as the Rust client's).
    config = {"key_prefix": prefix, "dimensions": ["ip"], "ip": {"limit": 10, "window_ms": 1000, "algorithm": "gcra", "burst": 30}}
    with TestClient(app(redis_url=server.url, config=config)) as client:
        assert get(client, "/other", "192.0.2.4").headers["ratelimit-policy"] == '"ip";q=30;w=3'


def test_503_carries_no_quota_fields_and_fail_open_only_the_policies():
    config = {"failure_mode": "closed", "dimensions": ["ip"]}
    with TestClient(app(redis_url=closed_port_url(), config=config)) as client:
        res = get(client, "/other", "192.0.2.9", x_request_id="c-1")
    assert res.status_code == 503 and res.headers["retry-after"] == "1"
    assert not [n for n in QUOTA_HEADERS if n in res.headers]
    assert res.json() == {
        "type": "about:blank", "title": "Rate limiter unavailable", "status": 503,
        "detail": "the rate limiter for dimension 'ip' is unavailable and fails closed",
        "dimension": "ip", "policy": "ip", "request_id": "c-1", "retry_after": 1, "trace_id": res.json()["trace_id"],
    }
    # Failing open nothing was decided: the policies, no RateLimit.
    with TestClient(app(redis_url=closed_port_url(), config={**config, "failure_mode": "open"})) as client:
        res = get(client, "/other", "192.0.2.9")
    assert res.status_code == 200 and res.headers["ratelimit-policy"] == '"ip";q=100;w=60'
    assert "ratelimit" not in res.headers and "x-ratelimit-limit" not in res.headers


# -- 3. identity ------------------------------------------------------------------------------


def test_one_api_key_per_request_bearer_and_client_networks():
    e = load_engine({"api_key_header": "Authorization", "trusted_proxies": ["10.0.0.0/8"], "dimensions": ["ip"]})

    def admit(values: List[str], peer: str = "192.0.2.1", xff: Optional[str] = None) -> Any:
        headers = [(b"authorization", v.encode()) for v in values]
        if xff is not None:
            headers.append((b"x-forwarded-for", xff.encode()))
        return e.admit("GET", "/x", headers, peer, "rid")

    for value, expected in [("Bearer k1", "k1"), ("bearer k1", "k1"), ("BEARER   k1 ", "k1"), ("Bearer\tk1", "k1"),
                            ("Bearer ", None), ("Bearer", None), ("k2", "k2")]:
        a = admit([value])
        assert isinstance(a, Admitted) and a.api_key == expected, value
    for values in (["ok", "other"], ["Basic dXNlcjpwdw=="], ["k\x01"], ["a b"]):
        refused = admit(values)
        assert isinstance(refused, Refusal) and refused.status == 400, values
        assert json.loads(refused.body)["title"] == "Bad Request"

    def client(peer: str, xff: Optional[str] = None, ipv6_prefix: int = 64) -> str:
        engine = load_engine({"ipv6_prefix": ipv6_prefix, "trusted_proxies": ["10.0.0.0/8"], "dimensions": ["ip"]})
        a = engine.admit("GET", "/x", [(b"x-forwarded-for", xff.encode())] if xff else [], peer, "rid")
        return engine.plan(a).items[0][0].split("{ip:")[1].split("}")[0]

    for addr, prefix, expected in [
        ("192.0.2.7", 64, "192.0.2.7"),
        ("::ffff:192.0.2.7", 64, "192.0.2.7"),
        ("2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff::1", 64, "2001:db8:1:2::/64"),
        ("2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48"),
        ("2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6"),
    ]:
        assert client(addr, ipv6_prefix=prefix) == expected
    assert client("::ffff:10.0.0.1", "::ffff:1.2.3.4") == "1.2.3.4"
    assert client("::ffff:203.0.113.9", "1.2.3.4") == "203.0.113.9"


def test_bearer_tokens_and_ipv6_networks_identify_clients(server, prefix, r):
    config = {
        "key_prefix": prefix, "api_key_header": "Authorization", "dimensions": ["api_key", "ip"],
        "ip": {"limit": 2, "algorithm": "token_bucket"},
    }
    with TestClient(app(redis_url=server.url, config=config, tiers={"pro-key": "pro"})) as client:
        res = get(client, "/other", "192.0.2.40", authorization="bearer pro-key")
        ipv6 = [get(client, "/other", ip).status_code
                for ip in ("2001:db8:0:1::1", "2001:db8:0:1:ffff::2", "2001:db8:0:1:1234::3", "2001:db8:0:2::1")]
        mapped = get(client, "/other", "::ffff:192.0.2.41")
    assert res.headers["ratelimit-policy"].startswith('"api_key";q=1000;')
    assert r.exists(f"{prefix}:{{k:{tenant_id('pro-key')}}}:key")
    assert ipv6 == [200, 200, 429, 200], "one budget per /64"
    assert mapped.status_code == 200
    assert r.exists(f"{prefix}:{{ip:2001:db8:0:1::/64}}", f"{prefix}:{{ip:2001:db8:0:2::/64}}", f"{prefix}:{{ip:192.0.2.41}}") == 3


def test_unknown_tier_keys_cost_no_round_trip_each(server, prefix, r):
    r.hset(f"{prefix}:tiers", mapping={"pro-key": "pro", "gold-key": "gold"})

    async def run() -> Tuple[Dict[str, int], Dict[str, int], List[Optional[str]]]:
        limiter = Limiter.from_url(server.url, timeout=PATIENT)
        try:
            # Negative cache only (no snapshot): a repeated unknown key costs one HGET per TTL,
            # in its own bounded LRU (random keys never evict known ones).
            neg = RedisHashTiers(limiter, f"{prefix}:tiers", ttl=60.0, capacity=2, snapshot_max_keys=0)
            got = [await neg("pro-key")]
            got += [await neg("nobody") for _ in range(5)]
            for k in ("x1", "x2", "nobody"):  # capacity 2: "nobody" was evicted
                await neg(k)
            got.append(await neg("pro-key"))
            # With the snapshot of the hash's keys, random keys are answered locally.
            snap = RedisHashTiers(limiter, f"{prefix}:tiers", ttl=60.0)
            assert await snap.refresh() == 2
            got += [await snap(f"random-{i}") for i in range(50)]
            got += [await snap("gold-key"), await snap("gold-key")]
            return neg.stats(), snap.stats(), got
        finally:
            await limiter.aclose()

    neg, snap, got = asyncio.run(run())
    assert got[:7] == ["pro"] + [None] * 5 + ["pro"] and got[7:57] == [None] * 50 and got[57:] == ["gold", "gold"]
    assert neg == {"redis_lookups": 5, "cached": 1, "unknown_local": 4, "snapshot_keys": 0}
    assert snap == {"redis_lookups": 1, "cached": 1, "unknown_local": 50, "snapshot_keys": 2}


# -- 4. access lists --------------------------------------------------------------------------


def test_access_lists_bypass_or_refuse_before_any_limit(server, prefix, r, tmp_path):
    # The configuration middleware/tests/live/policy.rs reads too (keys in Authorization).
    text = (ROOT / "testdata" / "flow" / "access_lists.toml").read_text()
    config = write(tmp_path / "access.toml", f'key_prefix = "{prefix}"\n{text}')
    with TestClient(app(redis_url=server.url, config=config)) as client:
        allowed = [get(client, "/other", "198.51.100.7") for _ in range(5)]
        partner = [get(client, "/other", "192.0.2.30", authorization="Bearer partner-key").status_code for _ in range(5)]
        denied = get(client, "/other", "198.51.100.13", x_request_id="deny-1")
        mapped = get(client, "/other", "::ffff:198.51.100.13")
        stolen = get(client, "/other", "198.51.100.7", authorization="bearer revoked-key")
        listed_not = [get(client, "/other", "192.0.2.31").status_code for _ in range(2)]
    assert [a.status_code for a in allowed] == [200] * 5 and partner == [200] * 5
    assert not [n for a in allowed for n in QUOTA_HEADERS if n in a.headers], "allowed: never limited"
    assert not r.exists(f"{prefix}:{{ip:198.51.100.7}}", f"{prefix}:{{ip:192.0.2.30}}"), "and not counted"
    assert denied.status_code == 403 and denied.headers["content-type"] == "application/problem+json"
    assert denied.headers["x-request-id"] == "deny-1"
    assert denied.content == (
        b'{"denied_by":"ip","detail":"the request\'s ip is on the gateway\'s deny list",'
        b'"request_id":"deny-1","status":403,"title":"Forbidden","trace_id":"'
        + denied.json()["trace_id"].encode() + b'","type":"about:blank"}'
    )
    assert mapped.status_code == 403, "an IPv4-mapped peer is matched as IPv4"
    assert stolen.status_code == 403 and stolen.json()["denied_by"] == "api_key", "deny wins over allow"
    assert listed_not == [200, 429]


# -- 5. rl-gateway's fleet keys ---------------------------------------------------------------


def test_fleet_keys_parse_and_are_checked():
    load_engine({"hot": [], "fleet": {"membership": True, "heartbeat_ms": 200, "ttl_ms": 900},
                 "leases": {"lifetime_ms": 100, "demand_ms": 50, "max_percent": 20}})
    assert "leases for [global]" in load_engine().explain()
    for text, message in [
        ('hot = ["nope"]', "unknown variant `nope`"),
        ("[fleet]\nheartbeat_ms = 3000", "shorter than ttl"),
        ("[fleet]\nttl_ms = 1000000000000000", "at most 1000000000000 ms"),
        ("[leases]\nlifetime_ms = 0", "leases"),
        ("[leases]\nmax_percent = 101", "max_percent must be between 1 and 100"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            PolicyEngine.from_toml(text)


# -- differential: the real rl-gateway and the middleware on one server -----------------------


def gateway_binary() -> Optional[Path]:
    """``$RL_GATEWAY``, else the newer of ``target/{release,debug}/rl-gateway`` (``make test``
    builds the debug one for the gateway's integration tests) if it is newer than the
    sources of the client and the gateway: a stale build would compare against old code."""
    if os.environ.get("RL_GATEWAY"):
        return Path(os.environ["RL_GATEWAY"])
    built = [p for p in (ROOT / "target" / d / "rl-gateway" for d in ("release", "debug")) if p.exists()]
    if not built:
        return None
    path = max(built, key=lambda p: p.stat().st_mtime)
    sources = [p for d in ("policy", "flow", "client", "gateway") for p in (ROOT / d / "src").rglob("*.rs")]
    newest = max((p.stat().st_mtime for p in sources), default=0.0)
    return path if path.stat().st_mtime >= newest else None


def gateway_config(prefix: str) -> str:
    return f"""
key_prefix = "{prefix}"
api_key_header = "Authorization"
hot = []
[fleet]
membership = false
[tiers.free]
limit = 2
[tiers.pro]
limit = 1000
[tiers.pro.ip]
limit = 3
[tiers.pro.endpoint]
limit = 4
window_ms = 3600000
[endpoint]
limit = 2
window_ms = 3600000
[ip]
limit = 50
"""


COMPARED = ("retry-after", "content-type") + QUOTA_HEADERS


# The waits in seconds that a response reports (`Retry-After`, `X-RateLimit-Reset`, `t=` and the
# problem body's retry): the two front ends answer a moment apart, so a second boundary can lie
# between them. Everything else must be equal to the byte.
_CLOCK = re.compile(r'(t=|retry after |"retry_after":\s?)(\d+)(?=$|[^\d])')
_WAIT_HEADERS = ("retry-after", "x-ratelimit-reset")


def _same_but_the_clock(a: Optional[str], b: Optional[str], name: str = "") -> bool:
    if a is None or b is None:
        return a == b
    if name in _WAIT_HEADERS:
        return a.isdigit() and b.isdigit() and abs(int(a) - int(b)) <= 1
    if _CLOCK.sub(r"\1#", a) != _CLOCK.sub(r"\1#", b):
        return False
    return all(abs(int(x[1]) - int(y[1])) <= 1 for x, y in zip(_CLOCK.findall(a), _CLOCK.findall(b)))


RULES = """
[[rules]]
name = "login"
paths = ["/login"]
methods = ["POST"]
key = ["ip"]
limits = ["2/minute", "3/hour"]

[[rules]]
name = "tenant"
paths = ["/api/**"]
headers = {{ "x-client" = "mobile" }}
key = ["header:x-tenant", "method"]
limit = 2
window_ms = 3600000
"""

Sent = Tuple[str, str, Dict[str, str]]


def compare_with_gateway(server: Any, r: Any, prefix: str, tmp_path: Path, config: str, requests: List[Sent]) -> Tuple[List[int], List[str]]:
    """Sends ``requests`` to a real rl-gateway and to the middleware, both on ``config``
    (``{prefix}`` replaced by each one's key prefix); asserts equal statuses, quota headers,
    refusal bodies and Redis keys; returns the statuses and the reported policies."""
    gw_prefix, py_prefix = f"{prefix}g", f"{prefix}p"
    path = write(tmp_path / "gw.toml", config.format(prefix=gw_prefix))
    port = free_port()
    binary = gateway_binary()
    assert binary is not None
    proc = subprocess.Popen(
        [str(binary), "--listen", f"127.0.0.1:{port}", "--redis", server.url, "--config", str(path),
         "--tier-hash", f"{prefix}:tiers", "--timeout-ms", "2000", "--log", "warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    statuses: List[int] = []
    reported: List[str] = []
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.05)

        def gateway(method: str, url: str, headers: Dict[str, str]) -> Tuple[int, Dict[str, str], bytes]:
            req = urllib.request.Request(f"http://127.0.0.1:{port}{url}", headers=headers, method=method)
            try:
                with urllib.request.urlopen(req, timeout=5) as res:
                    return res.status, {k.lower(): v for k, v in res.headers.items()}, b""
            except urllib.error.HTTPError as e:
                return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()

        mw = app(redis_url=server.url, config=write(tmp_path / "py.toml", config.format(prefix=py_prefix)),
                 routes=["/api/items/{id}", "/api/search", "/api/users/{id}"],
                 tier_hash=f"{prefix}:tiers")
        with TestClient(mw) as client:
            for i, (method, url, headers) in enumerate(requests):
                headers = {**headers, "X-Request-Id": f"diff-{i}", "traceparent": f"00-{i + 1:032x}-{i + 1:016x}-01"}
                g_status, g_headers, g_body = gateway(method, url, headers)
                res = client.request(method, url, headers={**headers, "x-test-peer": "127.0.0.1"})
                assert res.status_code == g_status, (i, url, res.content, g_body)
                statuses.append(g_status)
                reported.append(g_headers.get("ratelimit", "").split(";")[0])
                for name in COMPARED:
                    if g_status == 200 and name == "content-type":
                        continue
                    assert _same_but_the_clock(res.headers.get(name), g_headers.get(name), name), (
                        i, url, name, res.headers.get(name), g_headers.get(name))
                if g_status != 200:
                    assert _same_but_the_clock(res.content.decode(), g_body.decode()), (i, url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    # The limiters' keys are the same; rl-gateway alone records its refusals for GET /top.
    keys = lambda p: sorted(k[len(p):] for k in r.keys(f"{p}:*") if ":{top}:" not in k)  # noqa: E731
    assert keys(gw_prefix) == keys(py_prefix)
    return statuses, reported


@pytest.mark.skipif(gateway_binary() is None, reason="rl-gateway not built or older than its sources (cargo build -p rl-gateway)")
def test_rules_and_windows_give_rl_gateways_statuses_headers_and_keys(server, prefix, r, tmp_path):
    config = 'key_prefix = "{prefix}"\nhot = []\n[fleet]\nmembership = false\n' + RULES
    mobile = {"x-client": "mobile", "x-tenant": "acme"}
    requests: List[Sent] = (
        [("POST", "/login", {})] * 3  # the minute window refuses the third
        + [("POST", "/login/", {}), ("POST", "/x/../login", {})]  # the same path in other spellings
        + [("GET", "/api/items/1", mobile)] * 3  # acme's GETs: 2 per hour
        + [("POST", "/api/items/1", mobile)]  # another method: its own count
        + [("GET", "/api/search", {**mobile, "x-tenant": "other"})]  # another tenant
        + [("GET", "/api/search", {"x-client": "web", "x-tenant": "acme"})]  # not mobile: no rule
        + [("GET", "/api/search", {"x-client": "mobile"})]  # no x-tenant: the rule does not apply
        + [("GET", "/api/search", {"x-api-key": "a b"})]  # a key with a space inside: 400
    )
    statuses, reported = compare_with_gateway(server, r, prefix, tmp_path, config, requests)
    assert statuses == [200, 200, 429, 429, 429, 200, 200, 429, 200, 200, 200, 200, 400]
    assert reported[:3] == ['"login-1m"', '"login-1m"', '"login-1m"']
    assert reported[5:8] == ['"tenant"', '"tenant"', '"tenant"']
    assert r.exists(f"{prefix}p:{{ip:127.0.0.1}}:r:login:1m", f"{prefix}p:{{ip:127.0.0.1}}:r:login:1h") == 2
    assert r.exists(f"{prefix}p:{{h:x-tenant=acme}}:r:tenant:m:GET", f"{prefix}p:{{h:x-tenant=acme}}:r:tenant:m:POST") == 2


@pytest.mark.skipif(gateway_binary() is None, reason="rl-gateway not built or older than its sources (cargo build -p rl-gateway)")
def test_same_config_and_requests_give_rl_gateways_keys_headers_and_bodies(server, prefix, r, tmp_path):
    r.hset(f"{prefix}:tiers", "pro-key", "pro")
    requests: List[Sent] = (
        [("GET", "/api/items/1", {"Authorization": "Bearer pro-key"})] * 5  # the pro tier's own ip budget: 3
        + [("GET", "/api/items/2", {"Authorization": "free-key"})] * 3  # free: 2/min per key
        + [("GET", "/api/search", {})] * 3  # key-less: endpoint 2/hour per address
    )
    statuses, reported = compare_with_gateway(server, r, prefix, tmp_path, gateway_config("{prefix}"), requests)
    assert statuses == [200, 200, 200, 429, 429, 200, 200, 429, 200, 200, 429]
    # The pro key on its tier's ip budget; the free key's endpoint (longest t at r=0), then
    # its key denies first; the key-less endpoint.
    assert reported == ['"ip"'] * 5 + ['"endpoint"', '"endpoint"', '"api_key"'] + ['"endpoint"'] * 3
    assert r.exists(f"{prefix}p:{{ip:127.0.0.1}}:tier:pro")


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_readmes_toml_is_valid():
    readme = (ROOT / "python" / "README.md").read_text()
    toml = readme.split("### Configuration (TOML")[1].split("```toml\n")[1].split("```")[0]
    text = PolicyEngine.from_toml(toml, "README").explain()
    assert 'tier pro, ip: "ip" 500/1m sliding' in text and "1 denied keys" in text


def test_trace_context_is_continued_or_started_and_forwarded():
    """A valid ``traceparent`` sets the trace id of the problem body and is forwarded with this
    hop as the parent; an invalid or missing one starts a new trace (as rl-gateway does)."""
    from redis_rl.trace import trace_context

    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    t = trace_context([(b"traceparent", caller.encode())])
    assert (t.trace_id, t.parent_id) == ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    assert t.traceparent.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-") and t.traceparent.endswith("-01")
    assert t.traceparent != caller
    assert trace_context([(b"traceparent", ("01" + caller[2:] + "-more").encode())]).parent_id == "00f067aa0ba902b7"
    for bad in [caller.upper(), "ff" + caller[2:], caller + "-more", caller.replace("4bf9", "0000").replace(
            "2f3577b34da6a3ce929d0e0e4736", "0" * 28), "00-abc", ""]:
        n = trace_context([(b"traceparent", bad.encode())])
        assert n.parent_id is None and n.trace_id != "4bf92f3577b34da6a3ce929d0e0e4736" and len(n.trace_id) == 32, bad

    seen: Dict[str, str] = {}

    async def echo(request: Request) -> JSONResponse:
        seen.update(request.headers)
        return JSONResponse({})

    config = {"dimensions": ["ip"], "ip": {"limit": 1, "algorithm": "token_bucket"},
              "failure_mode": "local"}
    mw = RateLimitMiddleware(Starlette(routes=[Route("/x", echo)]), redis_url=closed_port_url(), config=config)
    with TestClient(mw) as client:
        ok = client.get("/x", headers={"traceparent": caller, "x-test-peer": "192.0.2.77"})
        denied = client.get("/x", headers={"traceparent": caller, "x-test-peer": "192.0.2.77"})
    assert ok.status_code == 200 and seen["traceparent"].startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
    assert seen["traceparent"] != caller
    assert denied.status_code == 429 and denied.json()["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
