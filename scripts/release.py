"""make release VERSION=x.y.z: cuts a release from a clean tree.

1. Refuses a tree with uncommitted changes, a version that is not x.y.z or not above the
   current one, and a release with nothing in CHANGELOG.md's Unreleased section nor in
   changelog.d/. The current version itself is accepted while it is untagged and CHANGELOG.md
   has its section already (a release prepared on main, as 0.1.0 was): that section takes the
   new entries and the release date.
2. Folds changelog.d/*.md (each branch's entries, Keep a Changelog headings) into Unreleased,
   then turns Unreleased into `## [x.y.z] - <date>` under a new empty Unreleased.
3. Bumps the one version (Cargo.toml's [workspace.package], Cargo.lock, redis_rl.__version__,
   node/package.json when it exists), checks them (scripts/check_versions.py), commits
   "Release x.y.z" and tags vx.y.z (annotated, with the notes); nothing is pushed.
4. Builds the artifacts (`make dist`), checks them as make test-dist does
   (scripts/dist_smoke.sh) and writes dist/RELEASE-NOTES.md, the version's section.

With --dry-run (make release VERSION=x.y.z DRY_RUN=1) it does all of that but the commit and
the tag: it shows what the release commit would change, puts the tree back as it was, and
prints the commands that commit and tag.

Usage: release.py VERSION [--dry-run] [--no-dist] [--date YYYY-MM-DD]"""

import argparse
import datetime
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import check_versions  # noqa: E402

UNRELEASED = "## [Unreleased]"
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
KINDS = ["Breaking changes and upgrade steps", "Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"]


def sections(body: str) -> dict:
    """`### Kind` headings of a changelog section (or a fragment) to their lines; text before
    the first heading goes under Changed."""
    found: dict = {}
    kind = "Changed"
    for line in body.splitlines():
        heading = re.match(r"^###\s+(.*\S)\s*$", line)
        if heading:
            kind = heading.group(1)
            continue
        found.setdefault(kind, []).append(line)
    return {k: "\n".join(v).strip("\n") for k, v in found.items() if "\n".join(v).strip()}


def render_sections(parts: dict) -> str:
    order = KINDS + sorted(k for k in parts if k not in KINDS)
    return "\n\n".join(f"### {k}\n\n{parts[k]}" for k in order if k in parts)


def split(text: str) -> tuple:
    """(head up to and including the Unreleased heading, Unreleased body, the rest)."""
    start = text.index(UNRELEASED) + len(UNRELEASED)
    following = re.search(r"^## ", text[start:], re.MULTILINE)
    end = start + following.start() if following else len(text)
    return text[:start], text[start:end].strip("\n"), text[end:]


def fold(changelog: str, fragments: list) -> str:
    """Unreleased with every fragment's entries merged in, kind by kind."""
    head, body, rest = split(changelog)
    parts = sections(body)
    for fragment in fragments:
        for kind, lines in sections(fragment).items():
            parts[kind] = f"{parts[kind]}\n{lines}" if kind in parts else lines
    merged = render_sections(parts)
    return f"{head}\n\n{merged}\n\n{rest}" if merged else f"{head}\n\n{rest}"


def cut(changelog: str, version: str, date: str) -> str:
    """Unreleased becomes the version's section; a new empty Unreleased stays on top."""
    head, body, rest = split(changelog)
    if not body.strip():
        raise ValueError("nothing to release: CHANGELOG.md's Unreleased section is empty")
    return f"{head}\n\n## [{version}] - {date}\n\n{body}\n\n{rest}"


def finish(changelog: str, version: str, date: str) -> str:
    """A prepared version's section (right under Unreleased) takes Unreleased's entries, kind by
    kind, and the release date; Unreleased stays, empty."""
    head, body, rest = split(changelog)
    section = re.match(rf"## \[{re.escape(version)}\][^\n]*\n(.*?)(?=^## |\Z)", rest, re.MULTILINE | re.DOTALL)
    if not section:
        raise ValueError(f"CHANGELOG.md has no section for {version} right under Unreleased")
    parts = sections(section.group(1))
    for kind, lines in sections(body).items():
        parts[kind] = f"{parts[kind]}\n{lines}" if kind in parts else lines
    return f"{head}\n\n## [{version}] - {date}\n\n{render_sections(parts)}\n\n{rest[section.end():]}"


def notes(changelog: str, version: str) -> str:
    """The body of one version's section."""
    found = re.search(rf"^## \[{re.escape(version)}\][^\n]*\n(.*?)(?=^## |\Z)", changelog, re.MULTILINE | re.DOTALL)
    if not found:
        raise ValueError(f"CHANGELOG.md has no section for {version}")
    return found.group(1).strip() + "\n"


def bump_cargo_toml(text: str, version: str) -> str:
    block = re.search(r"^\[workspace\.package\]\n(.*?)(?=^\[|\Z)", text, re.MULTILINE | re.DOTALL)
    if not block:
        raise ValueError("Cargo.toml has no [workspace.package]")
    inner = re.sub(r'^version = "[^"]*"', f'version = "{version}"', block.group(1), count=1, flags=re.MULTILINE)
    return text[: block.start(1)] + inner + text[block.end(1):]


def older(current: str, wanted: str) -> bool:
    def key(v: str) -> tuple:
        return tuple(int(n) for n in v.split("."))
    return key(current) < key(wanted)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version")
    parser.add_argument("--dry-run", action="store_true", help="everything but the commit and the tag")
    parser.add_argument("--no-dist", action="store_true", help="build nothing")
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    args = parser.parse_args()
    version = args.version
    tag = f"v{version}"
    if not SEMVER.match(version):
        sys.exit(f"release: VERSION must be x.y.z (numbers), got {version!r}")
    dirty = git("status", "--porcelain")
    if dirty.strip():
        sys.exit(f"release: the tree has uncommitted changes or untracked files; commit them first:\n{dirty}")
    if git("tag", "--list", tag).strip():
        sys.exit(f"release: tag {tag} exists already")
    current = check_versions.workspace_version()
    changelog_path = ROOT / "CHANGELOG.md"
    changelog = changelog_path.read_text()
    prepared = version == current and re.search(rf"^## \[{re.escape(version)}\]", changelog, re.MULTILINE)
    if not prepared and not older(current, version):
        sys.exit(f"release: VERSION {version} is not above the current version {current}")

    fragment_paths = sorted((ROOT / "changelog.d").glob("*.md"))
    changelog = fold(changelog, [p.read_text() for p in fragment_paths])
    try:
        changelog = finish(changelog, version, args.date) if prepared else cut(changelog, version, args.date)
    except ValueError as e:
        sys.exit(f"release: {e} and changelog.d/ holds no entry")
    changelog_path.write_text(changelog)
    cargo_toml = ROOT / "Cargo.toml"
    cargo_toml.write_text(bump_cargo_toml(cargo_toml.read_text(), version))
    init = ROOT / "python" / "redis_rl" / "__init__.py"
    init.write_text(re.sub(r'^__version__ = "[^"]*"', f'__version__ = "{version}"', init.read_text(),
                           count=1, flags=re.MULTILINE))
    changed = ["CHANGELOG.md", "Cargo.toml", "Cargo.lock", "python/redis_rl/__init__.py"]
    package_json = ROOT / "node" / "package.json"
    if package_json.exists():
        package = json.loads(package_json.read_text())
        package["version"] = version
        package_json.write_text(json.dumps(package, indent=2) + "\n")
        changed.append("node/package.json")
    # The workspace members' entries in Cargo.lock take the new version; nothing else moves.
    subprocess.run(["cargo", "update", "--workspace", "--offline", "-q"], cwd=ROOT, check=True)
    problems = check_versions.drift()
    if problems:
        sys.exit("release: versions still disagree after the bump:\n  " + "\n  ".join(problems))
    notes_text = notes(changelog, version)
    message = f"redis-rl {version}\n\n{notes_text}"
    fragments = [str(p.relative_to(ROOT)) for p in fragment_paths]
    if not args.dry_run:
        for path in fragments:
            git("rm", "-q", path)
        git("add", *changed)
        if git("diff", "--cached", "--name-only").strip():
            git("commit", "-q", "-m", f"Release {version}")
        # verbatim: git's default cleanup drops lines starting with #, the notes' headings.
        git("tag", "-a", "--cleanup=verbatim", tag, "-m", message)
        print(f"release: tagged {tag} on {git('rev-parse', '--short', 'HEAD').strip()} (here only; nothing pushed)")
    if not args.no_dist:
        subprocess.run(["make", "dist"], cwd=ROOT, check=True)
        # make test-dist's checks on every artifact.
        subprocess.run(["bash", "scripts/dist_smoke.sh"], cwd=ROOT, check=True)
        (ROOT / "dist" / "RELEASE-NOTES.md").write_text(f"# redis-rl {version}\n\n{notes_text}")
        print("release: artifacts, SHA256SUMS and RELEASE-NOTES.md in dist/")
    if args.dry_run:
        print(f"release: dry run; the release commit would change:\n{git('diff', '--stat', 'HEAD')}", end="")
        for path in fragments:
            print(f" {path} (deleted: folded into CHANGELOG.md)")
        git("checkout", "-q", "HEAD", "--", *changed)
        steps = ([f"git rm -q {' '.join(fragments)}"] if fragments else []) + [
            f"git commit -am 'Release {version}'", f"git tag -a {tag} -F <the version's CHANGELOG section>"]
        print(f"release: dry run: the tree is back as it was, nothing committed or tagged; "
              f"`make release VERSION={version}` then runs:\n  " + "\n  ".join(steps))
    else:
        print(f"release: check with `git show {tag}`, then publish with `git push origin HEAD {tag}`")


if __name__ == "__main__":
    main()
