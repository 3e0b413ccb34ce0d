"""The demo's fixed content: an agent fixing a daylight-saving bug, and what it saw.

Everything here is constant, so the demo writes the same objects (the same ids) every
time it runs. Tool call ids are derived from the call, as some agent frameworks do, so a
repeated call with the same output is the same payload and is stored once.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from ..journal import stable_hash

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
"""When the demo's conversation starts."""

TITLE = "Fix test_parse_dates failing around the DST change"

TASK = (
    "test_parse_dates fails in CI every spring when the clocks change. "
    "Can you find out why and fix it?"
)

SYSTEM_PROMPT = """You are a careful coding agent working in the repository calendar-sync.
Use the tools to inspect code and run tests before you change anything. Keep patches
small, explain the root cause of every bug you fix, and run the full test suite before
you report back. Never edit files outside the repository. When a test is flaky, find
out why instead of retrying it."""

PYTEST_FAIL = """============================= test session starts ==============================
platform linux -- Python 3.11.9, pytest-8.3.2, pluggy-1.5.0
rootdir: /home/dev/calendar-sync
configfile: pyproject.toml
collected 42 items

tests/test_dates.py ....F.....                                           [ 23%]
tests/test_events.py ................                                    [ 61%]
tests/test_sync.py ................                                      [100%]

=================================== FAILURES ===================================
_______________________________ test_parse_dates _______________________________

    def test_parse_dates():
        parsed = parse_event_time("2025-03-30 02:30", tz="Europe/Berlin")
>       assert parsed.isoformat() == "2025-03-30T03:30:00+02:00"
E       AssertionError: assert '2025-03-30T02:30:00+01:00' == '2025-03-30T03:30:00+02:00'
E         - 2025-03-30T03:30:00+02:00
E         ?             ^           ^
E         + 2025-03-30T02:30:00+01:00
E         ?             ^           ^

tests/test_dates.py:41: AssertionError
=========================== short test summary info ============================
FAILED tests/test_dates.py::test_parse_dates - AssertionError: assert '2025-03-...
========================= 1 failed, 41 passed in 0.84s ========================="""

PYTEST_PASS = """============================= test session starts ==============================
platform linux -- Python 3.11.9, pytest-8.3.2, pluggy-1.5.0
rootdir: /home/dev/calendar-sync
configfile: pyproject.toml
collected 42 items

tests/test_dates.py ..........                                           [ 23%]
tests/test_events.py ................                                    [ 61%]
tests/test_sync.py ................                                      [100%]

============================== 42 passed in 0.81s =============================="""

PYTEST_PASS_MORE = (
    PYTEST_PASS.replace("42 items", "43 items")
    .replace("..........   ", "...........  ")
    .replace("42 passed in 0.81s", "43 passed in 0.83s")
)

SOURCE = '''"""Parsing of event times entered by users."""

from datetime import datetime
from zoneinfo import ZoneInfo

FORMATS = ("%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M", "%d.%m.%Y %H:%M")


def parse_local(text: str) -> datetime:
    """Parse a naive local time in one of the accepted formats."""
    for fmt in FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    raise ValueError(f"unrecognised time: {text!r}")


def parse_event_time(text: str, tz: str) -> datetime:
    """Parse a wall-clock time in the calendar's zone into an aware datetime."""
    naive = parse_local(text)
    return naive.replace(tzinfo=ZoneInfo(tz))


def to_utc(moment: datetime) -> datetime:
    """The same instant in UTC."""
    return moment.astimezone(ZoneInfo("UTC"))
'''

PATCH_NORMALIZE = """--- a/src/calsync/dates.py
+++ b/src/calsync/dates.py
@@ -21,4 +21,7 @@ def parse_event_time(text: str, tz: str) -> datetime:
     \"\"\"Parse a wall-clock time in the calendar's zone into an aware datetime.\"\"\"
     naive = parse_local(text)
-    return naive.replace(tzinfo=ZoneInfo(tz))
+    zone = ZoneInfo(tz)
+    # a wall time inside the spring-forward gap does not exist: round-trip through
+    # UTC so it lands on the first valid instant after the gap, as calendars expect
+    return naive.replace(tzinfo=zone).astimezone(ZoneInfo("UTC")).astimezone(zone)
"""

PATCH_UTC = """--- a/src/calsync/dates.py
+++ b/src/calsync/dates.py
@@ -21,4 +21,4 @@ def parse_event_time(text: str, tz: str) -> datetime:
     naive = parse_local(text)
-    return naive.replace(tzinfo=ZoneInfo(tz))
+    return naive.replace(tzinfo=ZoneInfo("UTC"))
"""

PATCH_FOLD = """--- a/src/calsync/dates.py
+++ b/src/calsync/dates.py
@@ -21,4 +21,6 @@ def parse_event_time(text: str, tz: str) -> datetime:
     naive = parse_local(text)
-    return naive.replace(tzinfo=ZoneInfo(tz))
+    zone = ZoneInfo(tz)
+    moment = naive.replace(tzinfo=zone, fold=1)
+    return moment.astimezone(ZoneInfo("UTC")).astimezone(zone)
"""

NEW_TEST = """def test_parse_dates_autumn_overlap():
    parsed = parse_event_time("2025-10-26 02:30", tz="Europe/Berlin")
    assert parsed.isoformat() == "2025-10-26T02:30:00+02:00"
"""


def tool_call_id(name: str, args: str) -> str:
    """A call id derived from the call itself (repeated calls get the same id)."""
    return "call_" + stable_hash(name + "\0" + args)[:16]


def args(**fields: str) -> str:
    """Tool arguments as the JSON string a model would produce."""
    return json.dumps(fields, sort_keys=True)


def run_messages(iterations: int) -> list[dict[str, object]]:
    """The message list of the checkpoint run after ``iterations`` agent steps."""
    steps: list[tuple[str, dict[str, str], str]] = [
        ("bash", {"command": "python -m pytest -q"}, PYTEST_FAIL),
        ("read_file", {"path": "src/calsync/dates.py"}, SOURCE),
        ("bash", {"command": "python -m pytest -q tests/test_dates.py"}, PYTEST_FAIL),
        ("grep", {"pattern": "replace(tzinfo", "path": "src"}, "src/calsync/dates.py:23"),
        ("apply_patch", {"patch": PATCH_UTC}, "Applied 1 hunk to src/calsync/dates.py"),
        ("bash", {"command": "python -m pytest -q"}, PYTEST_FAIL),
        ("apply_patch", {"patch": PATCH_NORMALIZE}, "Applied 1 hunk to src/calsync/dates.py"),
        ("bash", {"command": "python -m pytest -q"}, PYTEST_PASS),
        ("write_file", {"path": "tests/test_dates.py", "append": NEW_TEST}, "Wrote 3 lines"),
        ("bash", {"command": "python -m pytest -q"}, PYTEST_PASS_MORE),
        (
            "bash",
            {"command": "git diff --stat"},
            " 2 files changed, 7 insertions(+), 1 deletion(-)",
        ),
        ("bash", {"command": "python -m pytest -q"}, PYTEST_PASS_MORE),
    ]
    messages: list[dict[str, object]] = [{"role": "user", "content": TASK}]
    for index, (name, tool_input, output) in enumerate(steps[:iterations]):
        call = tool_call_id(name, json.dumps(tool_input, sort_keys=True)) + f"_{index}"
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": call, "name": name, "input": tool_input}],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call, "content": output}],
            }
        )
    return messages
