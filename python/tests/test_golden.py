"""The golden command files (``testdata/commands/*.txt``, format in ``testdata/README.md``),
the same ones the Rust tests run: through redis-py against the module, and against a server
without it through the package's Lua twin (``FCALL rl`` of ``redis_rl._core.LUA_TWIN``,
the library the limiter loads), every reply and error text as written there, over RESP2 and
RESP3."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, List, Tuple, Union

import pytest
import redis
from redis.exceptions import ResponseError

from conftest import Server
from redis_rl._core import LUA_TWIN

COMMANDS = Path(__file__).resolve().parents[2] / "testdata" / "commands"

# An expected reply: an error line (str starting ERR/WRONGTYPE), a status (str), an int, None
# for any int (`*`), or a list of these.
Expected = Union[str, int, None, List[Any]]


def _scalar(word: str) -> Expected:
    if word == "*":
        return None
    try:
        return int(word)
    except ValueError:
        return word


def _array(tokens: Iterator[str]) -> List[Any]:
    items: List[Any] = []
    for word in tokens:
        if word == "]":
            return items
        items.append(_array(tokens) if word == "[" else _scalar(word))
    raise ValueError("an array without its ]")


def _expected(reply: str) -> Expected:
    if reply.startswith(("ERR ", "WRONGTYPE ")):
        return reply
    if reply.startswith("["):
        tokens = iter(reply.replace("[", " [ ").replace("]", " ] ").split())
        assert next(tokens) == "["
        return _array(tokens)
    return _scalar(reply)


def parse(path: Path) -> List[Tuple[str, List[str], Expected]]:
    """``(where, command words, expected reply)`` for each command of a golden file."""
    cases = []
    pending = None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.rstrip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("=> "):
            assert pending is not None, f"{path.name}:{n}: a reply without a command"
            cases.append((pending[0], pending[1], _expected(line[3:])))
            pending = None
        else:
            assert pending is None, f"{path.name}:{n}: a command without a reply before it"
            pending = (f"{path.name}:{n}", line.split(" "))
    assert pending is None, f"{path.name}: the last command has no reply"
    return cases


def _matches(expected: Expected, got: Any) -> bool:
    if isinstance(got, ResponseError):
        return isinstance(expected, str) and expected.startswith(("ERR ", "WRONGTYPE ")) and (
            expected == ("" if str(got).startswith("WRONGTYPE") else "ERR ") + str(got)
        )
    if expected is None:
        return isinstance(got, int)
    if isinstance(expected, list):
        return isinstance(got, list) and len(got) == len(expected) and all(
            _matches(e, g) for e, g in zip(expected, got)
        )
    if isinstance(expected, str):
        return got is True and expected == "OK" or got == expected.encode() or got == expected
    return got == expected


def _keys(words: List[str]) -> List[str]:
    if words[0].upper() == "RL.ALL":
        return words[2 : 2 + int(words[1])]
    return words[1:2]


def _send(client: redis.Redis, words: List[str], twin: bool) -> Any:
    if twin and words[0].upper().startswith("RL."):
        keys = _keys(words)
        skip = 2 + len(keys) if words[0].upper() == "RL.ALL" else 2
        words = ["FCALL", "rl", str(len(keys)), *keys, words[0].upper(), *words[skip:]]
    try:
        return client.execute_command(*words)
    except ResponseError as e:
        return e


FILES = sorted(COMMANDS.glob("*.txt"))


def test_the_golden_files_are_there() -> None:
    assert len(FILES) >= 8, os.listdir(COMMANDS)


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
@pytest.mark.parametrize("twin", [False, True], ids=["module", "twin"])
def test_every_golden_reply(twin: bool, protocol: int) -> None:
    server = Server(module=not twin)
    client = redis.Redis(port=server.port, socket_timeout=5, protocol=protocol)
    try:
        if twin:
            client.execute_command("FUNCTION", "LOAD", "REPLACE", LUA_TWIN)
        wrong = []
        for path in FILES:
            client.flushall()
            for where, words, expected in parse(path):
                got = _send(client, words, twin)
                if not _matches(expected, got):
                    wrong.append(f"{where} {' '.join(words)}: expected {expected!r}, got {got!r}")
        assert not wrong, "\n".join(wrong)
    finally:
        client.close()
        server.stop()
