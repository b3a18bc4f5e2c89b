"""Policies: a rate limiter of the core's registry with its parameters, validated when
built (by the core, with the server's ranges and error texts), a failure mode and shadow
mode. The constructors, commands and quotas come from the registry (``redis_rl._registry``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, ClassVar, List, Optional, Tuple, Union

from redis_rl._core import OpPolicy, Params
from redis_rl._registry import ALGORITHMS, LIMITERS, Algorithm, NumberRange, Option, limiter

__all__ = ["FailureMode", "Policy"]


@dataclass(frozen=True)
class FailureMode:
    """What to do when Redis cannot answer (error, timeout, or the breaker is open).

    - ``FailureMode.OPEN``: allow (availability first; unlimited over-admission while down).
    - ``FailureMode.CLOSED``: deny (protection first; a limiter outage is an API outage).
    - ``FailureMode.local(instances=1)`` (the default, ``FailureMode.LOCAL``): decide in this
      process with the same core algorithm, the limit divided by ``instances``.
    """

    name: str
    instances: int = 1

    OPEN: ClassVar["FailureMode"]
    CLOSED: ClassVar["FailureMode"]
    LOCAL: ClassVar["FailureMode"]

    def __post_init__(self) -> None:
        if self.name not in ("open", "closed", "local"):
            raise ValueError(f"failure mode must be open, closed or local, not {self.name!r}")
        if isinstance(self.instances, bool) or not isinstance(self.instances, int):
            raise TypeError("instances must be an int")
        if not 1 <= self.instances <= 2**32 - 1:
            raise ValueError("instances must be an integer between 1 and 4294967295")

    @staticmethod
    def local(instances: int = 1) -> "FailureMode":
        """The local fallback, for ``instances`` processes sharing the limit."""
        return FailureMode("local", instances)

    @staticmethod
    def parse(mode: Union[str, "FailureMode"], instances: int = 1) -> "FailureMode":
        """``"open"``, ``"closed"``, ``"local"`` or a ``FailureMode``."""
        if isinstance(mode, FailureMode):
            return mode
        if mode == "local":
            return FailureMode("local", instances)
        return FailureMode(mode)


FailureMode.OPEN = FailureMode("open")
FailureMode.CLOSED = FailureMode("closed")
FailureMode.LOCAL = FailureMode("local")


def _show(number: Union[NumberRange, Option], value: int) -> Union[str, int]:
    """How the server reads ``value`` of a parameter: an integer, a word or a signed offset."""
    if number.spelling == "words" and 1 <= value <= len(number.words):
        return number.words[value - 1]
    if number.spelling == "offset":
        return value - number.bias
    return value


class _Constructors(type):
    """Every rate limiter of the registry is a constructor of ``Policy`` named by its config
    name (``Policy.sliding(10, 1_000)``), generated rather than written: ``Policy.of``."""

    def __getattr__(cls, name: str) -> Callable[..., Policy]:
        if limiter(name) is None:
            raise AttributeError(name)

        def construct(*numbers: Optional[int], **options: Optional[int]) -> Policy:
            return Policy.of(name, *numbers, **options)

        construct.__name__ = name
        return construct


@dataclass(frozen=True)
class Policy(metaclass=_Constructors):
    """An algorithm with its parameters, what to do when Redis fails, and whether to enforce.

    Build it with a constructor named after a rate limiter of the registry
    (``token_bucket``, ``sliding``, ``fixed``, ``gcra``, ``log``), its parameters in the
    command's order, options by name or after them; invalid numbers raise ``ValueError``
    with the server's text (``capacity must be an integer between 1 and
    1000000000000000``), other types ``TypeError``::

        free = Policy.token_bucket(100, 100, 60_000)          # 100/min, burst 100
        strict = Policy.sliding(10, 1_000).on_failure(FailureMode.CLOSED)
        bursty = Policy.gcra(10, 1_000, burst=2)
    """

    algorithm: str
    """The config name of the algorithm (``sliding``)."""
    numbers: Tuple[int, ...]
    """The positional parameters, as the command takes them."""
    options: Tuple[Optional[int], ...] = ()
    """The options in the registry's order (``None``: the server's default)."""
    failure_mode: FailureMode = FailureMode("local")
    shadow: bool = False
    """Decide and record, but never deny (``Decision.allows`` is true)."""
    params: Params = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    op_policy: OpPolicy = field(default=None, init=False, repr=False, compare=False)  # type: ignore[assignment]
    """The policy as the limiter's ops take it (made once, with the failure mode and shadow)."""

    def __post_init__(self) -> None:
        params = self.params if self.params is not None else Params(self.algorithm, list(self.numbers), list(self.options))
        mode = self.failure_mode
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "op_policy", OpPolicy(params, mode.name, mode.instances, self.shadow))

    @staticmethod
    def of(algorithm: str, *numbers: Optional[int], **options: Optional[int]) -> "Policy":
        """The policy of the rate limiter ``algorithm`` (its config name): its positional
        parameters, then its options, in order or by name."""
        spec = limiter(algorithm)
        if spec is None:
            raise ValueError(f"algorithm must be one of {', '.join(LIMITERS)}, not {algorithm!r}")
        given = list(numbers[len(spec.params):])
        if len(given) > len(spec.options):
            raise TypeError(f"{algorithm}() takes at most {len(spec.params) + len(spec.options)} numbers")
        named = {o.name: (given[i] if i < len(given) else None) for i, o in enumerate(spec.options)}
        for name, value in options.items():
            if name not in named:
                raise TypeError(f"{algorithm}() got an unexpected keyword argument {name!r}")
            named[name] = value
        # A None among the positional numbers is refused by the core with the parameter's name.
        values: List[int] = list(numbers[: len(spec.params)])  # type: ignore[arg-type]
        p = Params(algorithm, values, list(named.values()))
        return Policy(algorithm, tuple(p.values), tuple(p.options), params=p)

    @staticmethod
    def from_rate(algorithm: str, limit: int, window_ms: int, burst: Optional[int] = None) -> "Policy":
        """The policy of the rate limiter ``algorithm`` for a configured rate: ``limit`` units
        per ``window_ms``, ``burst`` at once (the registry says which parameters they feed;
        errors name ``limit`` and ``window_ms``)."""
        p = Params.from_rate(algorithm, limit, window_ms, burst)
        return Policy(algorithm, tuple(p.values), tuple(p.options), params=p)

    def on_failure(self, mode: Union[str, FailureMode]) -> "Policy":
        """The same policy with another failure mode (``"open"``, ``"closed"``, ``"local"``)."""
        return replace(self, failure_mode=FailureMode.parse(mode))

    def with_shadow(self, shadow: bool = True) -> "Policy":
        """The same policy in (or out of) shadow mode."""
        return replace(self, shadow=bool(shadow))

    @property
    def spec_info(self) -> Algorithm:
        """The algorithm's entry in the registry."""
        return ALGORITHMS[self.algorithm]

    @property
    def command(self) -> str:
        """The single-key command, e.g. ``RL.TOKENBUCKET``."""
        return self.spec_info.command

    @property
    def spec_name(self) -> str:
        """The spec word of ``RL.ALL`` and ``RL.REFUND``, e.g. ``TOKENBUCKET``."""
        return self.spec_info.spec_name

    @property
    def upto(self) -> bool:
        """True if its command takes ``UPTO`` (partial grants)."""
        return self.spec_info.upto

    def spec(self) -> List[Union[str, int]]:
        """The parameters as the server reads them after the key or spec word (a period as
        its word, an offset signed)."""
        info = self.spec_info
        words: List[Union[str, int]] = [_show(r, v) for r, v in zip(info.params, self.numbers)]
        for option, value in zip(info.options, self.options):
            if value is not None:
                words += [option.token, _show(option, value)]
        return words

    @property
    def burst(self) -> Optional[int]:
        """The units that may pass at once, where the algorithm takes a burst (a token
        bucket's capacity, a GCRA's ``BURST``; ``None`` when not given or not taken)."""
        fields = self.spec_info.rate
        for name in ("burst_or_limit", "burst"):
            if name in fields:
                at = fields.index(name)
                values = self.numbers + self.options
                return values[at] if at < len(values) else None
        return None

    @property
    def limit(self) -> int:
        """The quota a client sees (``X-RateLimit-Limit``, ``q`` of ``RateLimit-Policy``):
        a token bucket's capacity, a GCRA's burst (default ``limit``), else ``limit``."""
        return self.params.quota()[0]

    @property
    def window_ms(self) -> int:
        """The window over which ``limit`` applies (``w`` of ``RateLimit-Policy``); for a
        token bucket, and a GCRA (a bucket of ``burst`` units), the time from empty to full."""
        return self.params.quota()[1]
