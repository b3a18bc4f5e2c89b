"""redis-rl for Python: rate limiting on the redis-rl Redis module.

- ``Limiter`` (asyncio) and ``SyncLimiter`` (blocking): ``check``, ``peek``, ``check_all``
  (and ``take_upto`` / ``refund``: a batch of units with ``UPTO``, the rest given back) with
  timeouts, a circuit breaker, a hot-key deny cache and failure modes (open, closed,
  local: the same core algorithms as the module, compiled in as ``redis_rl._core``), and
  ``settle`` (a reservation settled with the actual cost: refund or ``FORCE``).
- ``Policy`` constructors validated with the server's ranges and texts.
- ``redis_rl.asgi.RateLimitMiddleware`` for Starlette and FastAPI.
"""

from redis_rl._engine import BreakerOpen, FleetConfig, LeaseConfig, LimiterStats
from redis_rl.breaker import BreakerConfig, BreakerState
from redis_rl.decision import Decision, Grant, MultiDecision, ReplyError, Source
from redis_rl.limiter import DEFAULT_TIMEOUT, Limiter
from redis_rl.policy import FailureMode, Policy
from redis_rl.settle import Settled
from redis_rl.sync import SyncLimiter

__all__ = [
    "BreakerConfig",
    "BreakerOpen",
    "BreakerState",
    "DEFAULT_TIMEOUT",
    "Decision",
    "FailureMode",
    "FleetConfig",
    "Grant",
    "LeaseConfig",
    "Limiter",
    "LimiterStats",
    "MultiDecision",
    "Policy",
    "ReplyError",
    "Settled",
    "Source",
    "SyncLimiter",
]
__version__ = "0.2.0"
