"""make lint: every artifact carries the one version of Cargo.toml's [workspace.package].

Each workspace member inherits it (`version.workspace = true`); the Python package takes it
from python/Cargo.toml (pyproject.toml's `dynamic = ["version"]`, maturin) and repeats it as
`redis_rl.__version__`; node/package.json (and node/Cargo.toml), when they exist, state it.
Fails naming every file that drifted. Usage: check_versions.py"""

import json
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def workspace_version(root: Path = ROOT) -> str:
    return tomllib.loads((root / "Cargo.toml").read_text())["workspace"]["package"]["version"]


def drift(root: Path = ROOT) -> list:
    """What disagrees with the workspace version, one line each."""
    version = workspace_version(root)
    manifest = tomllib.loads((root / "Cargo.toml").read_text())
    problems = []
    members = ["."] + [m for m in manifest["workspace"]["members"] if m != "."]
    node_cargo = root / "node" / "Cargo.toml"
    if node_cargo.exists() and "node" not in members:
        members.append("node")
    for member in members:
        path = root / member / "Cargo.toml"
        package = tomllib.loads(path.read_text()).get("package", {})
        stated = package.get("version")
        if stated != {"workspace": True} and stated != version:
            problems.append(f"{path.relative_to(root)}: version {stated!r}, not `version.workspace = true`"
                            f" (or {version!r})")
    project = tomllib.loads((root / "python" / "pyproject.toml").read_text())["project"]
    if "version" in project.get("dynamic", []):
        pass  # maturin reads python/Cargo.toml, checked above
    elif project.get("version") != version:
        problems.append(f"python/pyproject.toml: version {project.get('version')!r}, not {version!r}")
    init = (root / "python" / "redis_rl" / "__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]*)"', init, re.MULTILINE)
    if not found or found.group(1) != version:
        problems.append(f"python/redis_rl/__init__.py: __version__ {found.group(1) if found else None!r}, "
                        f"not {version!r}")
    package_json = root / "node" / "package.json"
    if package_json.exists():
        stated = json.loads(package_json.read_text()).get("version")
        if stated != version:
            problems.append(f"node/package.json: version {stated!r}, not {version!r}")
    return problems


def main() -> None:
    problems = drift()
    if problems:
        sys.exit("versions drifted from Cargo.toml's [workspace.package] version "
                 f"{workspace_version()} (`make release VERSION=x.y.z` bumps them all):\n  " + "\n  ".join(problems))
    print(f"every artifact is version {workspace_version()}")


if __name__ == "__main__":
    main()
