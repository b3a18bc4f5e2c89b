"""`make gateway`: redis-server with the module, a small demo upstream and rl-gateway in front
of it, in the foreground until Ctrl-C (which stops all three).

The gateway listens on --listen (default 127.0.0.1:8080, RL_GATEWAY_LISTEN) with the
configuration deploy/gateway/gateway.toml; Redis and the upstream take free loopback ports.
The standard library only."""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ports import listen_port  # noqa: E402
from procs import stop  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


class Upstream(BaseHTTPRequestHandler):
    """Answers every request with a small JSON echo of what the gateway forwarded."""

    def answer(self):
        body = json.dumps({"upstream": "demo", "method": self.command, "path": self.path,
                           "forwarded_for": self.headers.get("X-Forwarded-For"),
                           "traceparent": self.headers.get("traceparent")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = answer

    def log_message(self, *args):
        pass


def start_redis(server, module):
    for _ in range(5):
        port = listen_port()
        proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--loadmodule", module],
                                stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            ping = subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True,
                                  text=True)
            if ping.stdout.strip() == "PONG":
                return proc, port
            time.sleep(0.05)
        stop(proc)
    raise SystemExit(f"{server} with {module} did not start")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateway", default=str(ROOT / "target/release/rl-gateway"))
    parser.add_argument("--module", default=str(ROOT / "target/release/libredis_rl.so"))
    parser.add_argument("--server", default=os.environ.get("RL_SERVER", "redis-server"))
    parser.add_argument("--config", default=str(ROOT / "deploy/gateway/gateway.toml"))
    parser.add_argument("--listen", default=os.environ.get("RL_GATEWAY_LISTEN", "127.0.0.1:8080"))
    args, extra = parser.parse_known_args()

    redis, redis_port = start_redis(args.server, args.module)
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    upstream_url = f"http://127.0.0.1:{upstream.server_address[1]}"
    cmd = [args.gateway, "--listen", args.listen, "--config", args.config,
           "--redis", f"redis://127.0.0.1:{redis_port}/", "--upstream", upstream_url, *extra]
    print(f"redis-server with the module on 127.0.0.1:{redis_port} "
          f"(redis-cli -p {redis_port}), demo upstream on {upstream_url}")
    print(f"rl-gateway on http://{args.listen}: try\n"
          f"  curl -i -H 'X-API-Key: alice' http://{args.listen}/api/items/42\n"
          f"  redis-cli -p {redis_port} HSET rl:tiers alice pro\n"
          f"  curl -s http://{args.listen}/metrics\n"
          f"Ctrl-C stops the gateway, the upstream and Redis.", flush=True)
    gateway = subprocess.Popen(cmd)
    try:
        gateway.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop(gateway)
        upstream.shutdown()
        stop(redis)
    return gateway.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
