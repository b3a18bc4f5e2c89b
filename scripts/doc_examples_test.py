"""Tests of the documentation's example runner (scripts/doc_examples.py): that it fails when an
example's output is changed, and that its tolerances are no wider than stated.
Run by `make test-docs` (python3 scripts/doc_examples_test.py); the live cases start a server."""

import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doc_examples as de  # noqa: E402

RUNNER = Path(__file__).resolve().parent / "doc_examples.py"

GOOD = """# Example

```console
$ redis-cli RL.TOKENBUCKET api:K 10 10 1000
1) (integer) 1      # allowed
2) (integer) 10
3) (integer) 9
4) (integer) 0
5) (integer) 100    # reset_after_ms
```

```text
$ this is never run
```
"""


class Matching(unittest.TestCase):
    def test_comments_are_not_compared(self):
        self.assertTrue(de.line_matches("1) (integer) 1      # allowed", "1) (integer) 1"))
        self.assertFalse(de.line_matches("1) (integer) 1      # allowed", "1) (integer) 0"))

    def test_tolerance_is_bounded(self):
        line = "5) (integer) 100    # reset_after_ms, ±5"
        self.assertTrue(de.line_matches(line, "5) (integer) 95"))
        self.assertTrue(de.line_matches(line, "5) (integer) 105"))
        self.assertFalse(de.line_matches(line, "5) (integer) 106"))
        self.assertFalse(de.line_matches(line, "4) (integer) 100"))

    def test_any_takes_any_integer_only(self):
        line = "4) (integer) 59000   # any"
        self.assertTrue(de.line_matches(line, "4) (integer) 1"))
        self.assertFalse(de.line_matches(line, "4) (integer) x"))

    def test_ellipsis_matches_lines(self):
        self.assertTrue(de.output_matches(["a", "...", "d"], ["a", "b", "c", "d"]))
        self.assertTrue(de.output_matches(["a", "...", "d"], ["a", "d"]))
        self.assertFalse(de.output_matches(["a", "...", "d"], ["a", "b"]))
        self.assertFalse(de.output_matches(["a"], ["a", "b"]))

    def test_blocks_and_steps(self):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "x.md"
            path.write_text(GOOD + "\n- item\n\n  ```python\n  assert True\n  ```\n")
            found = de.blocks(path)
        self.assertEqual([b.kind for b in found], ["console", "python"])
        self.assertEqual(found[1].text, "assert True\n")
        todo = de.steps("$ a \\\n  b\nout\n$ c\n")
        self.assertEqual([(s.command, s.expected) for s in todo], [("a \\\n  b", ["out"]), ("c", [])])


class Live(unittest.TestCase):
    """The runner against a live server: a correct example passes, a changed one fails."""

    def run_on(self, text):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "example.md"
            path.write_text(text)
            return subprocess.run([sys.executable, str(RUNNER), "-q", str(path)],
                                  capture_output=True, text=True, timeout=120, env=os.environ)

    def test_correct_example_passes(self):
        done = self.run_on(GOOD)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)

    def test_changed_output_fails(self):
        for before, after in [("3) (integer) 9", "3) (integer) 8"),
                              ("api:K 10 10 1000", "api:K 10 10 2000"),
                              ("5) (integer) 100 ", "5) (integer) 99  ")]:
            done = self.run_on(GOOD.replace(before, after, 1))
            self.assertEqual(done.returncode, 1, f"{after}: {done.stdout}")
            self.assertIn("FAIL", done.stdout)

    def test_a_bad_gateway_config_fails(self):
        good = self.run_on('```toml\nfailure_mode = "local"\n```\n')
        self.assertEqual(good.returncode, 0, good.stdout)
        bad = self.run_on('```toml\nfailure_mod = "local"\n```\n')
        self.assertEqual(bad.returncode, 1, bad.stdout)
        self.assertIn("failure_mod", bad.stdout)

    def test_failing_python_fails(self):
        done = self.run_on("```python\nassert 1 + 1 == 3\n```\n")
        self.assertEqual(done.returncode, 1, done.stdout)


if __name__ == "__main__":
    unittest.main()
