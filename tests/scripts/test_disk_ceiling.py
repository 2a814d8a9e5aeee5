"""benchmarks/disk_ceiling.py on a start-stop slice written here: a perfect ranking's
figures counted by hand, the sign of a failure, and the short per-day rows judged as the
whole ranking."""

from __future__ import annotations

import sys
from datetime import date, timedelta
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from disk_ceiling import ceiling, failures_of, judge, oracle_rows, shows_sign  # noqa: E402

SMART = ["smart_5", "smart_10", "smart_12", "smart_187", "smart_188", "smart_189", "smart_196", "smart_197"]
SMART += ["smart_198"]
D0 = date(2015, 1, 1)


def d(n: int) -> date:
    return D0 + timedelta(days=n)


def interval(serial, maker, first, stop, *, failed=False, **smart):
    values = {c: 0.0 for c in SMART} | smart
    return {
        "serial_number": serial,
        "model": f"{maker} M",
        "manufacturer": maker,
        "installed_at": date(2014, 6, 1),
        "start_date": d(first),
        "stop_date": d(stop),
        "failed": failed,
        **values,
    }


def write_slice(path: Path, healthy: int = 0) -> Path:
    """Days 0..39.  A (HGST) fails on day 20 with 3 reallocated sectors from day 10; B
    (Seagate) fails on day 25 showing nothing; C (Seagate), D (WDC) and ``healthy`` more
    WDC drives never fail."""
    rows = [
        interval("A", "HGST", 0, 10),
        interval("A", "HGST", 10, 21, failed=True, smart_5=3.0),
        interval("B", "ST", 0, 26, failed=True),
        interval("C", "ST", 0, 40),
        interval("D", "WDC", 0, 40),
        *(interval(f"E{i}", "WDC", i, 40) for i in range(healthy)),
    ]
    pl.DataFrame(rows).with_columns(pl.col(SMART).cast(pl.Float64)).write_parquet(path)
    return path


def test_a_perfect_ranking_counted_by_hand(tmp_path):
    results = ceiling(write_slice(tmp_path / "ss.parquet"), d(0), d(39), [0.25])
    fleet = next(r for r in results if r["maker"] == "all")
    o, s = fleet["oracle"], fleet["oracle_sign"]
    # 4 drives report on days 0..20 (1 flag a day), 3 on 21..25 (0.75 a day, carried: flags
    # on days 22 and 24), 2 on 26..39 (days 26, 28, .. 38): 30 flags.  Those of days 28..38
    # are unresolved (14 days reach past the end, day 40).
    assert o["flags"] == 30 and o["unresolved_flags"] == 6
    # oracle: A on days 0..5 (fails 15-20 days later: false), A on 6..10 (true), B (failing
    # later) on 11..20, 22 and 24 (true), C on day 26 (false): 17 true, 7 false
    assert (o["true_flags"], o["false_flags"], o["late_flags"]) == (17, 7, 0)
    assert o["precision"] == pytest.approx(17 / 24)
    assert (o["caught"], o["failures"]) == (2, 2) and o["lead_time_p50_h"] == 14 * 24
    # sign-only: B shows nothing and is never picked: A on 0..5 (false), A on 6..19 (true),
    # C on 20 (A fails that day: never picked), 22, 24 and 26 (false): 14 true, 10 false
    assert (s["true_flags"], s["false_flags"], s["late_flags"]) == (14, 10, 0)
    assert s["precision"] == pytest.approx(14 / 24) and (s["caught"], s["failures"]) == (1, 2)
    assert (fleet["failures"], fleet["with_sign"]) == (2, 1)
    makers = {r["maker"]: (r["failures"], r["with_sign"]) for r in results}
    assert makers == {"all": (2, 1), "HGST": (1, 1), "Seagate": (1, 0), "WDC": (0, 0)}


def test_the_short_rows_judge_as_the_whole_ranking(tmp_path):
    intervals = pl.read_parquet(write_slice(tmp_path / "ss.parquet", healthy=8))
    failures = shows_sign(intervals, failures_of(intervals))
    short = oracle_rows(intervals, failures, d(0), d(39), 0.25, chunk_days=9)
    whole = oracle_rows(intervals, failures, d(0), d(39), 0.25, spare=False)
    short, whole = ({g: rows[g] for g in ("all", "WDC")} for rows in (short, whole))
    assert all(short[g].height < whole[g].height for g in short)  # rows folded into one a day
    assert judge(short, failures, [0.25]) == judge(whole, failures, [0.25])


@pytest.mark.parametrize(
    ("smart", "changed_on", "sign"),
    [
        ("smart_10", 5, False),  # a spin retry 15 days before: before any flag could be true
        ("smart_10", 6, True),  # 14 days before: the first day a flag is true
        ("smart_10", 20, False),  # the failure day itself: too late
        ("smart_12", 10, False),  # power cycles are no sign
        ("smart_198", 0, True),  # an offline-uncorrectable count that stays non-zero
        ("smart_188", 19, True),  # command timeouts not reported before, then 1: a change
    ],
)
def test_a_sign_is_a_change_or_a_sector_count_in_the_flag_window(smart, changed_on, sign):
    rows = [interval("A", "HGST", 0, changed_on, smart_188=None)] if changed_on else []
    rows.append(interval("A", "HGST", changed_on, 21, failed=True, **{smart: 1.0}))
    intervals = pl.DataFrame(rows).with_columns(pl.col(SMART).cast(pl.Float64))
    assert shows_sign(intervals, failures_of(intervals)).get_column("sign").to_list() == [sign]
