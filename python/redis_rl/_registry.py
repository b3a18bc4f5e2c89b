"""The core's registry of algorithms, as data (``_core.REGISTRY_JSON``, generated from
core/src/registry.rs): names, parameters and their ranges, options, ``UPTO`` support, and
what a configured rate (``limit`` per ``window_ms``, ``burst``) feeds.

Nothing in the Python package names an algorithm: policies, configurations and commands
read this, so an algorithm added to the core is usable here without a change."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from redis_rl._core import REGISTRY_JSON

__all__ = ["ALGORITHMS", "LIMITERS", "Algorithm", "NumberRange", "Option"]


@dataclass(frozen=True)
class NumberRange:
    """A parameter's name and accepted range (``capacity``, 1 to 10**15)."""

    name: str
    min: int
    max: int
    spelling: str = "integer"
    """``integer``, ``offset`` (a signed number carried as ``value + bias``) or ``words``
    (carried as the word's position from 1)."""
    bias: int = 0
    words: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Option:
    """A named option after the positional parameters (GCRA's ``BURST b``)."""

    token: str
    value: str
    name: str
    min: int
    max: int
    spelling: str = "integer"
    bias: int = 0
    words: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Algorithm:
    """One algorithm of the registry."""

    config_name: str
    """The name in configurations and of its ``Policy`` constructor (``token_bucket``)."""
    spec_name: str
    """The spec word of ``RL.ALL`` and ``RL.REFUND`` (``TOKENBUCKET``)."""
    command: str
    """The single-key command (``RL.TOKENBUCKET``)."""
    label: str
    """The name in error texts and ``RL.STATE`` (``token bucket``)."""
    limiter: bool
    """A rate limiter (a policy can use it)."""
    upto: bool
    """Its command takes ``UPTO`` (partial grants, leases)."""
    params: Tuple[NumberRange, ...]
    options: Tuple[Option, ...]
    rate: Tuple[str, ...]
    """What each parameter (positional ones, then options) is in a configured rate:
    ``limit``, ``window_ms``, ``burst`` (an option) or ``burst_or_limit``."""


def _range(data: Mapping[str, Any]) -> Dict[str, Any]:
    return {**data, "words": tuple(data.get("words", ()))}


def _algorithm(data: Mapping[str, Any]) -> Algorithm:
    return Algorithm(
        config_name=data["config_name"],
        spec_name=data["spec_name"],
        command=data["command"],
        label=data["label"],
        limiter=data["limiter"],
        upto=data["upto"],
        params=tuple(NumberRange(**_range(p)) for p in data["params"]),
        options=tuple(Option(**_range(o)) for o in data["options"]),
        rate=tuple(data["rate"]),
    )


_DATA: Dict[str, Any] = json.loads(REGISTRY_JSON)
ALGORITHMS: Dict[str, Algorithm] = {a.config_name: a for a in map(_algorithm, _DATA["algorithms"])}
"""Every algorithm by config name, in registry order."""
LIMITERS: Tuple[str, ...] = tuple(name for name, a in ALGORITHMS.items() if a.limiter)
"""The config names of the rate limiters (what a policy or a configuration may name)."""


def limiter(name: str) -> Optional[Algorithm]:
    """The rate limiter ``name`` names, or ``None``."""
    a = ALGORITHMS.get(name)
    return a if a is not None and a.limiter else None
