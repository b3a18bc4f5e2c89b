"""The redis-rl core algorithms (Rust), as used by the Redis module itself."""

from typing import Any, Iterable, List, Optional, Tuple

MAX_COUNT: int
MAX_DURATION_MS: int
LUA_TWIN: str
"""The Lua twin of the module's commands (``lua/rl.lua``), for servers without the module."""
REGISTRY_JSON: str
"""The core's registry of algorithms as JSON (read by ``redis_rl._registry``)."""
SOURCES: List[str]
"""Who decided: the names of the one list (the Rust core's ``Source``), in its order."""

def check_cost(cost: int) -> int:
    """Returns ``cost`` if it is 0 to 10**15, else raises ``ValueError`` with the server's text."""

class Params:
    """Validated parameters of one rate limiter; errors carry the server's texts."""

    def __init__(
        self, algorithm: str, values: List[int], options: List[Optional[int]] = ...
    ) -> None: ...
    @staticmethod
    def from_rate(algorithm: str, limit: int, window_ms: int, burst: Optional[int] = None) -> "Params": ...
    @property
    def algorithm(self) -> str: ...
    @property
    def values(self) -> List[int]: ...
    @property
    def options(self) -> List[Optional[int]]: ...
    def quota(self) -> Tuple[int, int]: ...
    def share(self, instances: int) -> "Params": ...

class LocalStore:
    """Limiter states held in this process, decided by the core algorithms."""

    def __init__(self, capacity: int = 100_000) -> None: ...
    def check(
        self, key: str, params: Params, cost: int, now_us: int, peek: bool = False
    ) -> Tuple[bool, int, int, int, int]:
        """``(allowed, limit, remaining, retry_after_ms, reset_after_ms)``, as the module replies
        (``retry_after_ms`` -1 when no wait helps)."""
    def __len__(self) -> int: ...
    def clear(self) -> None: ...

# The policy engine (python/src/policy.rs): typed loosely here; its behaviour is the Rust
# engine's, tested through redis_rl.asgi.
class PolicyEngine:
    @staticmethod
    def default() -> "PolicyEngine": ...
    @staticmethod
    def from_json(text: str, name: str, routes: Iterable[str]) -> "PolicyEngine": ...
    @staticmethod
    def from_toml(text: str, name: str, routes: Iterable[str]) -> "PolicyEngine": ...
    def __getattr__(self, name: str) -> Any: ...

class Admitted:
    def __getattr__(self, name: str) -> Any: ...

class Refusal:
    def __getattr__(self, name: str) -> Any: ...

class BookingResult:
    def __getattr__(self, name: str) -> Any: ...

def normalize_path(path: str) -> str: ...
def request_id(value: Optional[bytes]) -> Optional[str]: ...
def tenant_id(api_key: str) -> str: ...

# The request flow (python/src/flow.rs): the steps are tuples whose first item names them
# ("tier", "book", "peek", "force", "respond", "forward"); typed loosely here, tested through
# redis_rl.asgi against rl-gateway.
class Flow:
    def __init__(self, engine: PolicyEngine) -> None: ...
    @property
    def held(self) -> int: ...
    def start(
        self,
        method: str,
        path: str,
        headers: List[Tuple[bytes, bytes]],
        peer: Optional[str],
        request_id: str,
        trace_id: Optional[str] = None,
        route: Optional[str] = None,
        settle_report: bool = False,
        now_ms: int = 0,
    ) -> Tuple["RequestFlow", Tuple[Any, ...]]: ...

class RequestFlow:
    def __getattr__(self, name: str) -> Any: ...

def ban_index_command(prefix: str, policy: str, subject: str, reply: List[int]) -> Optional[List[str]]: ...
def top_add_command(prefix: str, policy: str, minute: int, counts: List[Tuple[str, int]]) -> List[str]: ...
