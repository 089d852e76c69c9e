"""The recipe's schedule: a five-field cron line (`publish.schedule`, the one `.github/workflows/watch.yml` runs on)
and its period, the longest gap between two runs, which the status page measures "last run" and "stale" by.

Only what GitHub Actions' `on.schedule` accepts in numbers is read: `*`, `N`, `A-B`, `*/S`, `A-B/S` and lists of
those, in UTC; a name (`MON`, `JAN`) or a line that never fires is an error.
"""

from __future__ import annotations

import datetime as dt
import itertools

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 7))
_WEEKS = dt.timedelta(weeks=3)  # a line that names no day of month or month repeats every week
_YEARS = dt.timedelta(days=366 * 2)  # one that does is walked through two years (a 29 February included)
_START = dt.datetime(2027, 1, 1, tzinfo=dt.UTC)


def _values(text: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        span, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if span == "*":
                first, last = low, high
            else:
                first_text, _, last_text = span.partition("-")
                first = int(first_text)
                last = int(last_text) if last_text else (high if step_text else first)
        except ValueError:
            raise ValueError(f"cron {name} {part!r} is not a number, a range or a step (names are not read)") from None
        if step < 1 or not low <= first <= last <= high:
            raise ValueError(f"cron {name} {part!r} is outside {low}-{high}")
        values.update(range(first, last + 1, step))
    return frozenset(values)


def _fires(cron: str) -> tuple[list[dt.datetime], dt.timedelta]:
    fields = cron.split()
    if len(fields) != len(_FIELDS):
        raise ValueError(f"a cron line has 5 fields (minute hour day-of-month month day-of-week), not {cron!r}")
    minutes, hours, days, months, weekdays = (
        _values(text, name, low, high) for text, (name, low, high) in zip(fields, _FIELDS, strict=True)
    )
    weekdays = frozenset(day % 7 for day in weekdays)  # 7 is Sunday too
    any_day, any_weekday = fields[2] == "*", fields[4] == "*"
    window = _WEEKS if any_day and fields[3] == "*" else _YEARS
    fires = []
    for offset in range(window.days):
        day = _START + dt.timedelta(days=offset)
        on_day = day.day in days
        on_weekday = day.isoweekday() % 7 in weekdays
        # cron's rule: with both day fields restricted, either one matching is enough.
        matches = (on_day or on_weekday) if not (any_day or any_weekday) else (on_day and on_weekday)
        if day.month in months and matches:
            fires += [day.replace(hour=hour, minute=minute) for hour in sorted(hours) for minute in sorted(minutes)]
    return fires, window


def period(cron: str) -> dt.timedelta:
    """The longest gap between two consecutive runs of a cron line ("23 */6 * * *": 6 hours).

    Raises:
        ValueError: not a five-field numeric cron line, or one that never fires.
    """
    fires, window = _fires(cron)
    if len(fires) < 2:
        raise ValueError(f"cron {cron!r} fires less than twice in {window.days} days")
    gaps = [later - earlier for earlier, later in itertools.pairwise(fires)]
    if window == _WEEKS:
        gaps.append(fires[0] + window - fires[-1])  # the weekly pattern wraps around
    return max(gaps)


def describe(every: dt.timedelta) -> str:
    """A period in words: "6 h", "1 d", "90 min"."""
    minutes = int(every.total_seconds() // 60)
    if minutes % 1440 == 0:
        return f"{minutes // 1440} d"
    return f"{minutes // 60} h" if minutes % 60 == 0 else f"{minutes} min"
