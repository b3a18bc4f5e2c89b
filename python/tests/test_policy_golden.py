"""The golden policy files (``testdata/policy/NAME.toml`` and ``NAME.txt``, format in
``testdata/README.md``), the same ones the policy crate's tests read: each request through
the package's policy engine (what the ASGI middleware asks) must get exactly the refusal, or
the plan items and the headers of an allowed answer, written there."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import pytest

from redis_rl._core import PolicyEngine

POLICY = Path(__file__).resolve().parents[2] / "testdata" / "policy"


def requests(text: str) -> List[Tuple[str, List[str]]]:
    out: List[Tuple[str, List[str]]] = []
    for line in text.splitlines():
        line = line.rstrip()
        if not line or line.startswith("#"):
            continue
        if line[0].isupper():
            out.append((line, []))
        else:
            out[-1][1].append(line)
    return out


def outcome_lines(engine: PolicyEngine, line: str) -> List[str]:
    method, path, *words = line.split(" ")
    headers, peer, tier = [], None, None
    for word in words:
        name, value = word.split("=", 1)
        if name == "peer":
            peer = value
        elif name == "tier":
            tier = value
        else:
            headers.append((name.encode(), value.encode()))
    admitted = engine.admit(method, path, headers, peer, "r1")
    if not hasattr(admitted, "limited"):
        return [f"refused {admitted.status}"]
    if not admitted.limited:
        return ["passed"]
    plan = engine.plan(admitted, tier=tier)
    out = [f"item {key} {algorithm} {limit} {window_ms}"
           for key, algorithm, limit, window_ms, *_ in plan.items]
    # Every item allowed, one unit taken, idle again after its window.
    outcomes = [("allowed", None, limit - 1, window_ms, shadow, "redis")
                for _, _, limit, window_ms, _, shadow, *_ in plan.items]
    status, rendered, _ = engine.render(plan, outcomes, None, "r1")
    if status is not None:
        return out + [f"refused {status}"]
    return out + [f"header {n.decode()}: {v.decode()}" for n, v in rendered]


TOMLS = sorted(POLICY.glob("*.toml"))


def test_the_golden_policies_are_there() -> None:
    assert len(TOMLS) >= 3


@pytest.mark.parametrize("toml", TOMLS, ids=[t.stem for t in TOMLS])
def test_every_golden_request_gets_its_plan_and_headers(toml: Path) -> None:
    engine = PolicyEngine.from_toml(toml.read_text(), str(toml), [])
    cases = requests(toml.with_suffix(".txt").read_text())
    assert cases
    for request, expected in cases:
        assert outcome_lines(engine, request) == expected, request
