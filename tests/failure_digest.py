"""Print each failed test's message from a JUnit XML report, last, so a log read from its tail
(CI shows the head and the tail of ``make test``) says why every test failed, not only which.

``make test`` runs it after pytest when pytest failed:
``python tests/failure_digest.py .venv/junit.xml``. Captured logs (a daemon's, say) are left
out; each failure gives its id, its message and the last lines of its traceback.

>>> import tempfile, pathlib
>>> xml = ('<testsuites><testsuite><testcase classname="tests.test_x" name="test_y">'
...        '<failure message="assert 1 == 2">E   assert 1 == 2\\ntests/test_x.py:3: AssertionError'
...        '</failure></testcase></testsuite></testsuites>')
>>> with tempfile.TemporaryDirectory() as d:
...     p = pathlib.Path(d) / "j.xml"; _ = p.write_text(xml)
...     print("\\n".join(digest(p)))
== failed: tests.test_x::test_y
assert 1 == 2
  E   assert 1 == 2
  tests/test_x.py:3: AssertionError
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

TAIL_LINES = 25
"""Lines of each failure's traceback kept (its end, where the assertion and its message are)."""


def digest(report: Path) -> list[str]:
    """The lines to print: per failed or errored test, its id, message and traceback's end."""
    out: list[str] = []
    for case in ET.parse(report).getroot().iter("testcase"):
        for kind in ("failure", "error"):
            found = case.find(kind)
            if found is None:
                continue
            label = "failed" if kind == "failure" else "error"
            out.append(f"== {label}: {case.get('classname', '')}::{case.get('name', '')}")
            message = (found.get("message") or "").strip()
            if message:
                out.append(message.splitlines()[0][:500])
            out.extend("  " + line for line in (found.text or "").splitlines()[-TAIL_LINES:])
    return out


def main(argv: list[str]) -> int:
    """Print the digest of ``argv[0]`` (a JUnit XML file); 0 if there is none to read."""
    report = Path(argv[0]) if argv else Path(".venv/junit.xml")
    if not report.is_file():
        print(f"(no test report at {report})")
        return 0
    lines = digest(report)
    if lines:
        print("\nWhy each test failed (from " + str(report) + "):")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
