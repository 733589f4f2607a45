"""Counts in words (core/words.py), and no message that counts without it."""

import re
from pathlib import Path

from forewarn.core.words import counted

SOURCES = Path(__file__).resolve().parents[2] / "src" / "forewarn"


def test_one_is_singular_and_every_other_count_plural():
    assert [counted(n, "event") for n in (0, 1, 2)] == ["0 events", "1 event", "2 events"]
    assert counted(1, "entry", "entries") == "1 entry" and counted(3, "entry", "entries") == "3 entries"
    assert counted(1_000, "Azure VM") == "1,000 Azure VMs"


# A count printed before a plural noun, or a noun with "(s)": a message that says "1 events" or "1 event(s)".
NOUNS = (
    "events|hosts|VMs|instances|machines|units|waves|scopes|steps|checks|documents|changes|moves|entries|deliveries|"
    "attempts|faults|messages|reads|cases|operations|queues|subscriptions|records|rows|requests|calls|zones|failures|"
    "errors|tests|lines|streams|values|EventIds"
)
COUNT_THEN_PLURAL = re.compile(rf"\{{[^{{}}]+\}} (clock |event )?({NOUNS})\b|\b[a-z]+\(s\)")
# Where the count is never one (a bound, two or more by the condition), or the words are another service's, quoted as
# it writes them.
NEVER_ONE = (
    "{MAX_",  # a bound
    "{COMMIT_ATTEMPTS}",
    "{MOST_ENTRIES}",
    "values for one Query parameter",  # refused when there are two or more
    "is the start of",  # ambiguous: two or more EventIds
    "'more than 10' if len(rows) > 10 else len(rows)} EventIds",  # ambiguous too
    "exceeds the maximum number of instance IDs",  # EC2's own message
    "Parameter(s) EventPattern",  # EventBridge's own message
    "{window_minutes:g} minutes",  # Event Grid's own message
    "forewarn_json_text(s)",  # SQL, not words
    "json_valid(s)",
)


def test_no_message_counts_without_counted():
    found = [
        f"{path.relative_to(SOURCES)}:{number}: {line.strip()}"
        for path in [*SOURCES.rglob("*.py"), *SOURCES.rglob("*.js")]
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if COUNT_THEN_PLURAL.search(line) and not any(allowed in line for allowed in NEVER_ONE)
    ]
    assert not found, "count with core.words.counted (JavaScript: counted in dashboard/app.js):\n" + "\n".join(found)
