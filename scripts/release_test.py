"""Tests of `make release` (scripts/release.py), run by make test-dist: the changelog steps on
text, then whole releases in a throwaway clone of this repository's HEAD (commit and tag there,
no build): the current version's prepared section released (as 0.1.0 was), a dry run that
leaves the tree as it was, a fragment folded into the new version's section, every version
bumped, refusals of a dirty tree, of a version not above the current one and of an empty
release."""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import release  # noqa: E402

CHANGELOG = """# Changelog

Intro.

## [Unreleased]

### Added

- A thing.

## [0.1.0] - 2026-12-05

### Added

- The first.
"""
GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "release test", "GIT_AUTHOR_EMAIL": "release@test.invalid",
           "GIT_COMMITTER_NAME": "release test", "GIT_COMMITTER_EMAIL": "release@test.invalid"}


def test_fold_merges_fragments_kind_by_kind() -> None:
    folded = release.fold(CHANGELOG, ["### Fixed\n\n- A fix.\n", "### Added\n\n- Another thing.\n"])
    head, body, rest = release.split(folded)
    assert body == "### Added\n\n- A thing.\n- Another thing.\n\n### Fixed\n\n- A fix.", body
    assert rest.startswith("## [0.1.0] - 2026-12-05"), rest
    # Text before any heading is a change; breaking changes come first.
    folded = release.fold(CHANGELOG, ["- Loose.\n", "### Breaking changes and upgrade steps\n\n- Upgrade X first.\n"])
    kinds = re.findall(r"^### (.*)$", release.split(folded)[1], re.MULTILINE)
    assert kinds == ["Breaking changes and upgrade steps", "Added", "Changed"], kinds


def test_cut_makes_the_version_section_under_an_empty_unreleased() -> None:
    cut = release.cut(CHANGELOG, "0.2.0", "2026-12-24")
    assert "## [Unreleased]\n\n## [0.2.0] - 2026-12-24\n\n### Added\n\n- A thing.\n\n## [0.1.0]" in cut, cut
    assert release.notes(cut, "0.2.0") == "### Added\n\n- A thing.\n"
    assert release.notes(cut, "0.1.0") == "### Added\n\n- The first.\n"
    try:
        release.cut(cut, "0.3.0", "2026-12-25")
    except ValueError as e:
        assert "nothing to release" in str(e)
    else:
        raise AssertionError("an empty Unreleased section was released")


def test_finish_puts_new_entries_into_the_prepared_section() -> None:
    text = CHANGELOG.replace("## [0.1.0] - 2026-12-05\n\n### Added\n\n- The first.\n",
                             "## [0.1.0] - 2026-12-05\n\n### Added\n\n- The first.\n\n## [0.0.9] - 2026-11-01\n\n- Old.\n")
    done = release.finish(text, "0.1.0", "2026-12-24")
    assert "## [Unreleased]\n\n## [0.1.0] - 2026-12-24\n\n### Added\n\n- The first.\n- A thing.\n\n## [0.0.9]" in done, done
    try:
        release.finish(text, "0.2.0", "2026-12-24")
    except ValueError as e:
        assert "no section for 0.2.0" in str(e)
    else:
        raise AssertionError("a version without a section was finished")


def test_bump_changes_only_the_workspace_version() -> None:
    text = '[package]\nversion = "9.9.9"\n\n[workspace.package]\nedition = "2021"\nversion = "0.1.0"\n\n[x]\nversion = "1"\n'
    bumped = release.bump_cargo_toml(text, "0.2.0")
    assert bumped == text.replace('version = "0.1.0"', 'version = "0.2.0"'), bumped
    assert release.older("0.9.0", "0.10.0") and not release.older("0.2.0", "0.2.0")


def run(cwd: Path, *cmd: str, ok: Optional[bool] = True) -> subprocess.CompletedProcess:
    """cmd in cwd; ok: must succeed (True), must fail (False), either (None)."""
    got = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=GIT_ENV)
    assert ok is None or (got.returncode == 0) == ok, f"{' '.join(cmd)}: exit {got.returncode}\n{got.stdout}{got.stderr}"
    return got


def test_a_release_in_a_clone() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "repo"
        run(ROOT, "git", "clone", "-q", "--no-local", str(ROOT), str(clone))
        current = release.check_versions.workspace_version(clone)
        major, minor, _ = (int(n) for n in current.split("."))
        wanted = f"{major}.{minor + 1}.0"
        script = ["python3", "scripts/release.py", "--no-dist", "--date", "2026-12-24"]
        # The current version as a prepared release: its section is there, its tag is not yet.
        run(clone, "git", "tag", "-d", f"v{current}", ok=None)
        assert f"## [{current}]" in (clone / "CHANGELOG.md").read_text()

        (clone / "changelog.d").mkdir(exist_ok=True)
        (clone / "changelog.d" / "some-branch.md").write_text("### Fixed\n\n- A fix from a branch.\n")
        refused = run(clone, *script, wanted, ok=False)
        assert "uncommitted changes or untracked files" in refused.stderr, refused.stderr
        run(clone, "git", "add", "changelog.d/some-branch.md")
        run(clone, "git", "commit", "-q", "-m", "a branch's entry")
        head = run(clone, "git", "rev-parse", "HEAD").stdout

        dry = run(clone, *script, "--dry-run", current)
        assert "git tag -a v" + current in dry.stdout and "CHANGELOG.md" in dry.stdout, dry.stdout
        assert run(clone, "git", "status", "--porcelain").stdout == "", "the dry run left changes"
        # No tag made (earlier releases' tags stay), no commit.
        assert run(clone, "git", "tag", "--list", f"v{current}").stdout == ""
        assert run(clone, "git", "rev-parse", "HEAD").stdout == head

        run(clone, *script, current)
        assert run(clone, "git", "tag", "--list", f"v{current}").stdout.strip() == f"v{current}"
        changelog = (clone / "CHANGELOG.md").read_text()
        assert changelog.count(f"## [{current}]") == 1, changelog[:2000]
        assert f"## [Unreleased]\n\n## [{current}] - 2026-12-24\n" in changelog, changelog[:2000]
        assert "- A fix from a branch." in release.notes(changelog, current)
        assert not (clone / "changelog.d" / "some-branch.md").exists()
        refused = run(clone, *script, current, ok=False)
        assert f"tag v{current} exists already" in refused.stderr, refused.stderr

        refused = run(clone, *script, wanted, ok=False)
        assert "nothing to release" in refused.stderr, refused.stderr
        (clone / "changelog.d").mkdir(exist_ok=True)
        (clone / "changelog.d" / "other-branch.md").write_text("### Added\n\n- A thing from a branch.\n")
        run(clone, "git", "add", "changelog.d/other-branch.md")
        run(clone, "git", "commit", "-q", "-m", "another branch's entry")
        run(clone, *script, wanted)
        assert run(clone, "git", "tag", "--list", f"v{wanted}").stdout.strip() == f"v{wanted}"
        assert run(clone, "git", "status", "--porcelain").stdout == "", "the release left changes"
        assert release.check_versions.workspace_version(clone) == wanted
        assert release.check_versions.drift(clone) == []
        assert f'__version__ = "{wanted}"' in (clone / "python/redis_rl/__init__.py").read_text()
        assert re.search(rf'name = "redis-rl"\nversion = "{re.escape(wanted)}"', (clone / "Cargo.lock").read_text())
        changelog = (clone / "CHANGELOG.md").read_text()
        assert f"## [Unreleased]\n\n## [{wanted}] - 2026-12-24\n" in changelog, changelog[:2000]
        assert release.notes(changelog, wanted) == "### Added\n\n- A thing from a branch.\n"
        tag_message = run(clone, "git", "tag", "-l", "--format=%(contents)", f"v{wanted}").stdout
        assert "### Added\n\n- A thing from a branch." in tag_message, tag_message
        refused = run(clone, *script, f"{major}.{minor}.1", ok=False)
        assert "is not above the current version" in refused.stderr, refused.stderr


def main() -> None:
    tests = [(name, fn) for name, fn in sorted(globals().items()) if name.startswith("test_") and callable(fn)]
    for name, fn in tests:
        fn()
        print(f"release_test: {name} ok")
    print(f"{len(tests)} passed, 0 failed")


if __name__ == "__main__":
    main()
