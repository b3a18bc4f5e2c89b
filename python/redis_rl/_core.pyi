"""The redis-rl core algorithms (Rust), as used by the Redis module itself."""

from typing import Optional, Tuple

MAX_COUNT: int
MAX_DURATION_MS: int
LUA_TWIN: str
"""The Lua twin of the module's commands (``lua/rl.lua``), for servers without the module."""

def check_cost(cost: int) -> int:
    """Returns ``cost`` if it is 0 to 10**15, else raises ``ValueError`` with the server's text."""

class Params:
    """Validated parameters of one algorithm; errors carry the server's texts."""

    @staticmethod
    def token_bucket(capacity: int, refill_tokens: int, refill_ms: int) -> "Params": ...
    @staticmethod
    def sliding(limit: int, window_ms: int) -> "Params": ...
    @staticmethod
    def fixed(limit: int, window_ms: int) -> "Params": ...
    @staticmethod
    def gcra(limit: int, period_ms: int, burst: Optional[int] = None) -> "Params": ...
    @staticmethod
    def log(limit: int, window_ms: int) -> "Params": ...
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
