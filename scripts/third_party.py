"""THIRD-PARTY-NOTICES.md from the dependency tree: `make notices` writes it, `make lint` runs
this with --check and fails while the committed file differs from a fresh one.

- Rust crates: the build graph of deny.toml (every workspace member's normal and build
  dependencies on x86_64 Linux), listed by `cargo deny list` with the license cargo-deny
  settled on, and the license files each crate ships (found through `cargo metadata`). They are
  compiled into the module, rl-gateway, the wheel and the Node addon, so their texts are here.
- Python: the runtime requirements of python/pyproject.toml and the license their newest
  matching wheel declares (`pip download`). pip installs them beside the wheel; none is bundled.
- Node: the runtime `dependencies` of node/package.json, when that file exists, with the license
  that node/package-lock.json (else node/node_modules, else `npm view`) gives; npm installs them.

Usage: third_party.py [--check] [--cargo-deny CMD] [--pip CMD]"""

import argparse
import email.message
import email.parser
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "THIRD-PARTY-NOTICES.md"
LICENSE_FILE = re.compile(r"^(LICEN[CS]E|COPYING|COPYRIGHT|NOTICE|UNLICENSE)([-_.].*)?$", re.IGNORECASE)


def run(cmd: list, cwd: Path = ROOT) -> str:
    got = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if got.returncode != 0:
        sys.exit(f"third_party: {' '.join(cmd)} failed:\n{got.stderr.strip()}")
    return got.stdout


def manifests() -> list:
    """The root workspace, and node/ when it is a cargo workspace of its own."""
    found = [ROOT / "Cargo.toml"]
    node = ROOT / "node" / "Cargo.toml"
    if node.exists() and "[workspace]" in node.read_text():
        found.append(node)
    return found


def crates(cargo_deny: list) -> list:
    """(name, version, license expression, repository, license texts) of every registry crate."""
    seen = {}
    for manifest in manifests():
        listed = json.loads(run(cargo_deny + ["--manifest-path", str(manifest), "--workspace", "list",
                                              "--format", "json", "--layout", "crate"]))
        meta = json.loads(run(["cargo", "metadata", "--format-version", "1", "--locked",
                               "--manifest-path", str(manifest)]))
        packages = {(p["name"], p["version"]): p for p in meta["packages"]}
        for key, entry in listed.items():
            name, version, source = key.split(" ", 2)
            if not source.startswith("registry+"):
                continue  # a workspace member: this project's own code, under LICENSE
            package = packages[(name, version)]
            directory = Path(package["manifest_path"]).parent
            texts = []
            for path in sorted(directory.iterdir(), key=lambda p: p.name):
                if path.is_file() and LICENSE_FILE.match(path.name):
                    texts.append((path.name, path.read_text(errors="replace").strip()))
            expression = package.get("license") or " OR ".join(entry["licenses"])
            seen[(name, version)] = (name, version, expression, package.get("repository") or "", texts)
    return sorted(seen.values())


def requirement_name(spec: str) -> str:
    return re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0]


def wheel_license(metadata: email.message.Message) -> str:
    if metadata.get("License-Expression"):
        return metadata["License-Expression"]
    short = (metadata.get("License") or "").strip()
    if short and "\n" not in short and len(short) < 60:
        return short
    classifiers = [c.split(" :: ")[-1] for c in metadata.get_all("Classifier") or [] if c.startswith("License ::")]
    return ", ".join(classifiers) or "not declared"


def python_deps(pip: list) -> list:
    """(requirement, license, home page) of python/pyproject.toml's runtime dependencies."""
    text = (ROOT / "python" / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.MULTILINE | re.DOTALL)
    specs = re.findall(r'"([^"]+)"', block.group(1)) if block else []
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in specs:
            wanted = spec.split(";")[0].strip()
            run(pip + ["download", "-q", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:",
                       "-d", tmp, wanted])
            name = requirement_name(wanted).lower().replace("-", "_")
            wheel = next(p for p in Path(tmp).glob("*.whl") if p.name.lower().startswith(name + "-"))
            with zipfile.ZipFile(wheel) as zf:
                member = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
                metadata = email.parser.Parser().parsestr(zf.read(member).decode())
            urls = metadata.get_all("Project-URL") or []
            source = next((u.split(", ", 1)[1] for u in urls if u.lower().startswith(("source", "code", "repository"))),
                          next((u.split(", ", 1)[1] for u in urls), metadata.get("Home-page") or ""))
            found.append((spec, wheel_license(metadata), source))
    return found


def node_deps() -> list:
    """(name, range, license) of node/package.json's runtime dependencies; none without it."""
    package = ROOT / "node" / "package.json"
    if not package.exists():
        return []
    wanted = json.loads(package.read_text()).get("dependencies", {})
    lock_path = ROOT / "node" / "package-lock.json"
    lock = json.loads(lock_path.read_text()).get("packages", {}) if lock_path.exists() else {}
    found = []
    for name, spec in sorted(wanted.items()):
        license = lock.get(f"node_modules/{name}", {}).get("license")
        installed = ROOT / "node" / "node_modules" / name / "package.json"
        if not license and installed.exists():
            license = json.loads(installed.read_text()).get("license")
        if not license:
            views = json.loads(run(["npm", "view", f"{name}@{spec}", "license", "--json"]) or "null")
            license = views[-1] if isinstance(views, list) else views
        found.append((name, spec, license or "not declared"))
    return found


# Protos that rl-gateway-proto (gateway/proto) holds trimmed copies of and compiles into
# rl-gateway (its generated code and reflection descriptor set): not crates, so listed by hand.
PROTOS = [
    ("Envoy's API: envoy.service.ratelimit.v3, envoy.service.discovery.v3, "
     "envoy.extensions.common.ratelimit.v3, envoy.config.core.v3, envoy.type.v3",
     "Apache-2.0", "https://github.com/envoyproxy/envoy (api/)"),
    ("envoyproxy/ratelimit's API: ratelimit.config.ratelimit.v3", "Apache-2.0",
     "https://github.com/envoyproxy/ratelimit (api/)"),
    ("googleapis: google.rpc.Status", "Apache-2.0", "https://github.com/googleapis/googleapis"),
]


def render(rust: list, python: list, node: list) -> str:
    out = [
        "# Third-party notices",
        "",
        "redis-rl is MIT licensed (LICENSE). This file lists what it is built from and with, and is",
        "generated by `make notices` (scripts/third_party.py, from `cargo deny list` over the build",
        "graph of deny.toml, `cargo metadata`, python/pyproject.toml and node/package.json); do not",
        "edit it by hand. `make lint` fails when it is stale or when a crate's license is outside",
        "deny.toml's allow list.",
        "",
        "## Rust crates",
        "",
        "Compiled into `libredis_rl.so`, `rl-gateway`, the Python wheel's extension and the Node",
        "addon. Each crate's license files follow the table.",
        "",
        "| crate | version | license | source |",
        "|---|---|---|---|",
    ]
    out += [f"| {n} | {v} | {lic} | {repo} |" for n, v, lic, repo, _ in rust]
    out += ["", "## Protocol definitions", "",
            "Trimmed copies in gateway/proto (each `.proto` names its source), compiled into `rl-gateway`",
            "by the rl-gateway-proto crate. The Apache License 2.0's text is among the license texts below.",
            "", "| protos | license | source |", "|---|---|---|"]
    out += [f"| {what} | {lic} | {src} |" for what, lic, src in PROTOS]
    out += ["", "## Python packages", "",
            "Runtime requirements of the `redis-rl` wheel; pip installs them, the wheel bundles none.", "",
            "| requirement | license | source |", "|---|---|---|"]
    out += [f"| `{spec}` | {lic} | {src} |" for spec, lic, src in python]
    out += ["", "## Node packages", ""]
    if node:
        out += ["Runtime dependencies of node/package.json; npm installs them, the addon bundles none.", "",
                "| package | range | license |", "|---|---|---|"]
        out += [f"| {n} | `{spec}` | {lic} |" for n, spec, lic in node]
    else:
        out += ["None (no node/package.json)."]
    out += ["", "## License texts of the Rust crates", ""]
    by_text: dict = {}
    for name, version, lic, _, texts in rust:
        if not texts:
            by_text.setdefault(("", f"No license file in the crate; its declared license: {lic}."), []).append(
                f"{name} {version}")
        for file_name, text in texts:
            by_text.setdefault((file_name, text), []).append(f"{name} {version}")
    for (file_name, text), users in sorted(by_text.items(), key=lambda kv: (kv[1][0], kv[0][0])):
        out += [f"### {', '.join(users)}" + (f": {file_name}" if file_name else ""), "", "```text", text, "```", ""]
    return "\n".join(out).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when THIRD-PARTY-NOTICES.md is stale")
    parser.add_argument("--cargo-deny", default="cargo-deny deny", help="how to run cargo-deny")
    parser.add_argument("--pip", default=f"{sys.executable} -m pip", help="how to run pip")
    args = parser.parse_args()
    fresh = render(crates(args.cargo_deny.split()), python_deps(args.pip.split()), node_deps())
    if args.check:
        if not OUT.exists() or OUT.read_text() != fresh:
            sys.exit(f"{OUT.name} is stale (a dependency or its license changed): run `make notices` and commit it")
        print(f"{OUT.name} is up to date")
        return
    OUT.write_text(fresh)
    print(f"wrote {OUT.name}")


if __name__ == "__main__":
    main()
