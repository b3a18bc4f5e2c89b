"""Runs the examples of the documentation (`make test-docs`) against a live server.

Every fenced block of README.md and docs/src/*.md (or of the files named on the command line)
whose info string is `console`, `toml`, `python` or `js` is executed; every other block (`text`, `sh`,
`rust`, ...) is only shown. The rules (docs/src/development.md, "Examples in the
documentation", says the same for writers):

- console: a line starting with `$ ` is a command (a line ending in `\\` continues it); the lines
  after it, up to the next `$ ` line, are its expected output. Commands run with bash in the
  repository's root, one block after another on one redis-server with the module (flushed,
  functions included, before each block), with `redis-cli` aimed at that server (and printing
  the formatted `1) (integer) 1` replies it prints on a terminal). Two spaces or more followed
  by `#` start a comment on an expected line; the comment is not compared, except for these
  annotations in it: `±N` (the line's last integer may differ from the one shown by at most N,
  for outputs that depend on the clock) and `any` alone (the line's last integer may be any
  integer). An expected line `...` matches any number of output lines.
- toml: an rl-gateway configuration file, checked with `rl-gateway --check-config` (or, with a
  gateway that does not have that flag, loaded by its configuration loader).
- Before each console and python block, after the flush, one request goes through an rl-gateway
  (its default configuration, when the binary is there) on the same server, so the block runs
  where a gateway has written its keys (`rl:{global}`, `rl:{ip:...}`, ...), as it would on a
  user's server: an example must use key names of its own, not the gateway's.
- python: a program run with the virtual environment's Python (redis_rl installed); it passes
  when it exits with status 0, so examples state what they expect with `assert`. The address
  `127.0.0.1:6379` (or `localhost:6379`) in the text is replaced by the live server's.
- js: an ES module run with node from node/ (so `redis-rl` is the package built there by
  `make node-build`, and its development dependencies, ioredis among them, resolve); the same
  rules as python (exit status 0, `node:assert` for what it expects, the address replaced).

Usage: python3 scripts/doc_examples.py [--server redis-server] [--module path.so]
       [--python .venv/bin/python] [--node node] [--gateway path/to/rl-gateway] [files...]
Exit status 0 when every example matched, 1 otherwise (each mismatch is printed).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ports import listen_port  # noqa: E402
from procs import stop  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RUN_KINDS = ("console", "toml", "python", "js")
COMMAND_TIMEOUT_S = 30


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    kind: str
    text: str

    def where(self):
        return f"{self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path}:{self.line}"


def blocks(path):
    """The fenced code blocks of a Markdown file whose kind is run."""
    found = []
    fence = None
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        stripped = line.lstrip()
        if fence is None:
            m = re.match(r"(`{3,}|~{3,})\s*([\w+-]*)", stripped)
            if m:
                fence = (m.group(1), m.group(2).lower(), number, len(line) - len(stripped), [])
        elif re.fullmatch(re.escape(fence[0][0]) + "{%d,}" % len(fence[0]), stripped.strip()):
            marker, kind, start, indent, body = fence
            if kind in RUN_KINDS:
                found.append(Block(path, start, kind, "\n".join(body) + "\n"))
            fence = None
        else:
            indent = fence[3]
            fence[4].append(line[indent:] if line[:indent].strip() == "" else line)
    return found


# ---- console ---------------------------------------------------------------------------------


@dataclass
class Step:
    command: str
    expected: list = field(default_factory=list)


def steps(text):
    """The commands of a console block and the output each expects."""
    result = []
    continuing = False
    for line in text.splitlines():
        if continuing:
            result[-1].command += "\n" + line
            continuing = line.endswith("\\")
        elif line.startswith("$ "):
            result.append(Step(line[2:]))
            continuing = line.endswith("\\")
        elif result:
            result[-1].expected.append(line)
        elif line.strip():
            raise ValueError(f"output before the first command: {line!r}")
    return result


COMMENT = re.compile(r"\s{2,}#(.*)$")
LAST_INT = re.compile(r"(-?\d+)(?!.*\d)")


def expectation(line):
    """(text to compare, tolerance): tolerance None for an exact line, an int for `±N`, and
    -1 for `any`."""
    m = COMMENT.search(line)
    if not m:
        return line.rstrip(), None
    comment = m.group(1)
    text = line[: m.start()].rstrip()
    tol = re.search(r"±\s*(\d+)", comment)
    if tol:
        return text, int(tol.group(1))
    if re.search(r"(^|[\s,(])any($|[\s,)])", comment):
        return text, -1
    return text, None


def line_matches(expected, actual):
    text, tolerance = expectation(expected)
    actual = actual.rstrip()
    if tolerance is None:
        return text == actual
    want, got = LAST_INT.search(text), LAST_INT.search(actual)
    if not want or not got:
        return False
    if text[: want.start()] != actual[: got.start()] or text[want.end():] != actual[got.end():]:
        return False
    return tolerance < 0 or abs(int(want.group(1)) - int(got.group(1))) <= tolerance


def output_matches(expected, actual):
    """Matches expected lines (with `...` wildcards) against actual lines."""
    expected = [e for e in expected]
    while expected and not expected[-1].strip():
        expected.pop()
    actual = list(actual)
    while actual and not actual[-1].strip():
        actual.pop()

    def match(i, j):
        if i == len(expected):
            return j == len(actual)
        if expected[i].strip() == "...":
            return any(match(i + 1, k) for k in range(j, len(actual) + 1))
        return j < len(actual) and line_matches(expected[i], actual[j]) and match(i + 1, j + 1)

    return match(0, 0)


# ---- the live server -------------------------------------------------------------------------


class Server:
    """redis-server (or valkey-server) with the module on a free loopback port."""

    def __init__(self, binary, module, workdir):
        self.workdir = workdir
        for _ in range(5):
            self.port = listen_port()
            self.proc = subprocess.Popen(
                [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", workdir, "--loadmodule", module],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self.wait_ready():
                return
            stop(self.proc)
        raise RuntimeError(f"{binary} with {module} did not start")

    def wait_ready(self):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if self.cli("PING").stdout.strip() == "PONG":
                return True
            time.sleep(0.05)
        return False

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True,
                              text=True, timeout=COMMAND_TIMEOUT_S)

    def reset(self):
        self.cli("FLUSHALL")
        self.cli("FUNCTION", "FLUSH")

    def close(self):
        stop(self.proc)


class Gateway:
    """rl-gateway with its default configuration in front of the live server: `touch()` sends
    one request through it, which writes the keys a gateway writes."""

    def __init__(self, binary, redis_port):
        self.port = listen_port()
        self.proc = subprocess.Popen(
            [binary, "--listen", f"127.0.0.1:{self.port}", "--redis", f"redis://127.0.0.1:{redis_port}/",
             "--no-fleet", "--log", "warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not self.touch():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                stop(self.proc)
                raise RuntimeError(f"{binary} did not start")
            time.sleep(0.1)

    def touch(self):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/api/items/1",
                                         headers={"X-API-Key": "doc-examples-gateway"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def close(self):
        stop(self.proc)


def cli_wrapper(directory, port):
    """A `redis-cli` first on PATH that talks to the live server and formats replies as on a
    terminal (redis-cli prints bare values when its output is a pipe)."""
    real = shutil.which("redis-cli")
    path = Path(directory) / "redis-cli"
    path.write_text(f'#!/bin/sh\nexec {real} -p {port} --no-raw "$@"\n')
    path.chmod(0o755)


# ---- runners ---------------------------------------------------------------------------------


class Runner:
    def __init__(self, args, workdir):
        self.args = args
        self.workdir = workdir
        self.server = Server(args.server, args.module, workdir)
        bindir = Path(workdir) / "bin"
        bindir.mkdir()
        cli_wrapper(bindir, self.server.port)
        self.env = dict(os.environ)
        self.env["PATH"] = f"{bindir}:{self.env['PATH']}"
        self.env["RL_DOC_PORT"] = str(self.server.port)
        self.env["REDIS_URL"] = f"redis://127.0.0.1:{self.server.port}/0"
        self._check_config = None
        self.gateway = None
        if Path(args.gateway).exists():
            try:
                self.gateway = Gateway(args.gateway, self.server.port)
            except Exception:
                self.server.close()
                raise

    def close(self):
        if self.gateway:
            self.gateway.close()
        self.server.close()

    def run(self, block):
        """None when the example holds, else what went wrong."""
        self.server.reset()
        if self.gateway and block.kind in ("console", "python") and not self.gateway.touch():
            return "the request through rl-gateway before the block failed"
        return getattr(self, f"run_{block.kind}")(block)

    def run_console(self, block):
        try:
            todo = steps(block.text)
        except ValueError as e:
            return str(e)
        if not todo:
            return "a console block without a `$ ` command"
        for step in todo:
            try:
                done = subprocess.run(["bash", "-c", step.command], cwd=ROOT, env=self.env,
                                      capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                return f"$ {step.command}\n  did not finish within {COMMAND_TIMEOUT_S} s"
            actual = (done.stdout + done.stderr).splitlines()
            if not output_matches(step.expected, actual):
                return (f"$ {step.command}\n  expected:\n" + indent(step.expected)
                        + "  got:\n" + indent(actual))
        return None

    def run_python(self, block):
        if not Path(self.args.python).exists():
            return f"no Python with redis_rl at {self.args.python} (make test-python creates .venv)"
        code = re.sub(r"(127\.0\.0\.1|localhost):6379\b", f"127.0.0.1:{self.server.port}",
                      block.text)
        script = Path(self.workdir) / "example.py"
        script.write_text(code)
        try:
            done = subprocess.run([self.args.python, str(script)], cwd=ROOT, env=self.env,
                                  capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"did not finish within {COMMAND_TIMEOUT_S} s"
        if done.returncode != 0:
            return f"exit status {done.returncode}:\n" + indent((done.stdout + done.stderr).splitlines())
        return None

    def run_js(self, block):
        package = ROOT / "node"
        if not (package / "dist" / "esm" / "index.js").exists():
            return "the Node package is not built (make node-build)"
        code = re.sub(r"(127\.0\.0\.1|localhost):6379\b", f"127.0.0.1:{self.server.port}",
                      block.text)
        # In node/, so the package resolves itself by name and its dependencies resolve.
        script = package / f".doc-example-{os.getpid()}.mjs"
        script.write_text(code)
        try:
            done = subprocess.run([self.args.node, str(script)], cwd=ROOT, env=self.env,
                                  capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"did not finish within {COMMAND_TIMEOUT_S} s"
        finally:
            script.unlink(missing_ok=True)
        if done.returncode != 0:
            return f"exit status {done.returncode}:\n" + indent((done.stdout + done.stderr).splitlines())
        return None

    def check_config_flag(self):
        if self._check_config is None:
            help_text = subprocess.run([self.args.gateway, "--help"], capture_output=True,
                                       text=True, timeout=COMMAND_TIMEOUT_S).stdout
            self._check_config = "--check-config" in help_text
        return self._check_config

    def run_toml(self, block):
        config = Path(self.workdir) / "example.toml"
        config.write_text(block.text)
        env = {k: v for k, v in self.env.items() if not k.startswith("RL_GATEWAY_")}
        if self.check_config_flag():
            cmd = [self.args.gateway, "--check-config", str(config)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                  timeout=COMMAND_TIMEOUT_S)
            if done.returncode != 0:
                return "rl-gateway --check-config refused it:\n" + indent((done.stdout + done.stderr).splitlines())
            return None
        # A gateway without --check-config reads the file before anything else and only then
        # checks --instances: an invalid --instances after a file that loaded proves the load.
        cmd = [self.args.gateway, "--config", str(config), "--instances", "0",
               "--redis", self.env["REDIS_URL"]]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S)
        if "--instances must be at least 1" in done.stderr:
            return None
        return "rl-gateway refused it:\n" + indent((done.stdout + done.stderr).splitlines())


def indent(lines):
    return "".join(f"    {line}\n" for line in lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--server", default=os.environ.get("RL_SERVER", "redis-server"))
    parser.add_argument("--module", default=str(ROOT / "target/release/libredis_rl.so"))
    parser.add_argument("--python", default=str(ROOT / ".venv/bin/python"))
    parser.add_argument("--node", default="node")
    parser.add_argument("--gateway", default=os.environ.get("RL_GATEWAY", str(ROOT / "target/debug/rl-gateway")))
    parser.add_argument("-q", "--quiet", action="store_true", help="print failures only")
    args = parser.parse_args()
    files = [f.resolve() for f in args.files] or [ROOT / "README.md", *sorted((ROOT / "docs/src").glob("*.md"))]
    todo = [b for f in files for b in blocks(f)]
    failures = 0
    with tempfile.TemporaryDirectory(prefix="rl-doc-") as workdir:
        runner = Runner(args, workdir)
        try:
            for block in todo:
                problem = runner.run(block)
                if problem:
                    failures += 1
                    print(f"FAIL {block.where()} ({block.kind})\n{problem}", flush=True)
                elif not args.quiet:
                    print(f"ok   {block.where()} ({block.kind})", flush=True)
        finally:
            runner.close()
    counts = {k: sum(b.kind == k for b in todo) for k in RUN_KINDS}
    print(f"doc examples: {len(todo) - failures} of {len(todo)} held "
          f"({', '.join(f'{n} {k}' for k, n in counts.items())}; {len(files)} files)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
