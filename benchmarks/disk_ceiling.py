"""Real disks: how high the targets sit -- a perfect ranking's precision and recall at
budgets that are a share of the drives reporting each day.  UPPER BOUNDS: the oracle sees
the future.

Two oracle rankings of each day's drives, judged exactly as ``benchmarks/bench_real_disks.py``
judges a model (the package's :func:`~foreshock.models.evaluation.top_of_list.top_of_list`
with the carry rule of :mod:`foreshock.budget`, a 14-day horizon, a lead of at least a day):

``oracle``
    Every drive whose flag that day would be true (it fails 1 to 14 days later) first,
    the one failing latest first (the longest lead: each failure is flagged on the first
    day of its window when the budget allows); a drive failing that day (a flag would be
    late) last; every other drive in between, by unit id (the judge's tie rule).
``oracle_sign``
    The same, but a failure that shows no SMART sign (:func:`shows_sign`) is never picked:
    its drive-days rank last, as a late flag's do.  The best any ranking over these
    attributes could do, however it reads them.

Each is judged for the whole fleet and for each maker (the maker's drives ranked among
themselves at the same share), at each share (default 0.1 % and 0.5 % a day).

The drives reporting a day are those with a reading that day in the canonical samples
that ``scripts/backblaze_to_canonical.py`` writes (its own expansion, :func:`expand`, run
here a few weeks at a time in memory; nothing is written); failures are its failures
(the drive's last reading day).  Memory holds a few weeks of samples and a short list
per day: below the top of each day's list, the drives the budget can never reach are
one row per day standing for all of them (:func:`day_rows`; the judge counts them among
the drives reporting through ``fleet_weight`` and never flags them, so its figures are
those of the whole ranking, as ``tests/scripts/test_disk_ceiling.py`` checks).

Usage::

    uv run python benchmarks/disk_ceiling.py [--data PATH] [--start DATE] [--end DATE]
        [--shares 0.001 0.005] [--json PATH]

The default period, 2015-08-26 .. 2016-09-29, is the days the real-disk benchmark judges
out of sample on the whole file.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared/data/backblaze_hds/backblaze_2014_2016_startstop.parquet"
START, END = date(2015, 8, 26), date(2016, 9, 29)
SHARES = (0.001, 0.005)
HORIZON_DAYS, LEAD_DAYS = 14, 1
ORACLES = ("oracle", "oracle_sign")
# The SMART attributes of a sign: any of these changes, or any of the sector counts is not 0.
SIGN_CHANGES = ("smart_5", "smart_10", "smart_187", "smart_188", "smart_189", "smart_196", "smart_197", "smart_198")
SIGN_LEVELS = ("smart_5", "smart_187", "smart_197", "smart_198")
REST = "(the rest of the day's drives)"  # the one row standing for the drives never reached

_spec = importlib.util.spec_from_file_location("backblaze_to_canonical", ROOT / "scripts/backblaze_to_canonical.py")
converter = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(converter)


failures_of = converter.failures_of  # the converter's failures: the drive's last reading day


def shows_sign(intervals: pl.DataFrame, failures: pl.DataFrame) -> pl.DataFrame:
    """``failures`` with ``sign``: the failure shows a SMART sign on a day a flag would be
    true (14 days to 1 day before it).

    A sign on day ``d`` is either

    * a **change**: one of SMART 5, 10, 187, 188, 189, 196, 197, 198 reads differently on
      ``d`` than on the drive's previous reading (which may be before the 14 days; an
      attribute the drive does not report reads 0, as in the benchmark's SMART rules, so
      one that appears with a count is a change; a drive's first reading has no change), or
    * a **level**: one of SMART 5, 187, 197, 198 (reallocated, reported uncorrectable,
      pending, offline uncorrectable sectors) is above 0 on ``d``.

    A failure without one looks, over these attributes, like every healthy drive on every
    day a flag could catch it: no ranking of them can pick it but by chance.
    """
    fails = failures.select("unit_id", pl.col("failed_at").dt.date().alias("day"))
    spans = (
        intervals.join(fails, left_on="serial_number", right_on="unit_id")
        .sort("serial_number", "start_date")
        .with_columns(
            (
                pl.col("start_date").shift(1).over("serial_number").is_not_null()
                & pl.any_horizontal(
                    pl.col(c).fill_null(0) != pl.col(c).fill_null(0).shift(1).over("serial_number")
                    for c in SIGN_CHANGES
                )
            ).alias("_changed"),
            pl.any_horizontal((pl.col(c) > 0).fill_null(False) for c in SIGN_LEVELS).alias("_level"),
        )
    )
    first = pl.col("day") - pl.duration(days=HORIZON_DAYS)
    last = pl.col("day") - pl.duration(days=LEAD_DAYS)
    # the interval's days are start_date .. stop_date - 1; the change is on its first day
    overlaps = (pl.col("start_date") <= last) & (pl.col("stop_date") > first)
    changed_in = pl.col("_changed") & (pl.col("start_date") >= first) & (pl.col("start_date") <= last)
    signed = spans.group_by("serial_number").agg(((overlaps & pl.col("_level")) | changed_in).any().alias("sign"))
    return failures.join(signed.rename({"serial_number": "unit_id"}), on="unit_id", how="left").with_columns(
        pl.col("sign").fill_null(False)
    )


def oracle_scores(drive_days: pl.DataFrame, failures: pl.DataFrame) -> pl.DataFrame:
    """``drive_days`` (``unit_id, ts, maker``) with the two oracles' scores (module docstring):
    the days to the failure (1 to 14) where a flag would be true and the oracle may pick
    it, -1 where the drive fails within 14 days but may not be picked (the failure day, a
    late flag; for ``oracle_sign`` every day of a failure without a sign), 0 otherwise."""
    days_to = (pl.col("failed_at") - pl.col("ts")).dt.total_days()
    soon = days_to.is_between(0, HORIZON_DAYS)
    true = days_to.is_between(LEAD_DAYS, HORIZON_DAYS)

    def score(pickable: pl.Expr) -> pl.Expr:
        return pl.when(true & pickable).then(days_to).when(soon).then(-1).otherwise(0).cast(pl.Float64)

    return drive_days.join(failures.select("unit_id", "failed_at", "sign"), on="unit_id", how="left").select(
        "unit_id",
        "ts",
        "maker",
        score(pl.lit(True)).alias("oracle"),
        score(pl.col("sign")).alias("oracle_sign"),
        # every drive-day of a failing drive stays a row (the judge counts a failure of the drives it ranks)
        pl.col("failed_at").is_not_null().alias("_failing"),
    )


def day_rows(scored: pl.DataFrame, share: float, spare: bool = True) -> pl.DataFrame:
    """The rows of ``scored`` (``unit_id, ts, oracle, oracle_sign, _failing``) the judge
    needs at budgets up to ``share`` of the drives reporting, with ``fleet_weight``.

    Kept: every row with a non-zero score and every row of a failing drive, and, of the
    rest (score 0 in both oracles, ranked by unit id), the first ``ceil(share * reporting)
    + 1`` of each day: a day never flags more than ``ceil`` of its allowance, and the
    non-zero rows above them.  The others become one row a day (:data:`REST`, no score,
    ``fleet_weight`` = how many drives it stands for), so the drives reporting are counted
    right and the judge's flags, outcomes and counts are those of the whole ranking.
    ``spare=False`` keeps every row (the whole ranking, for checking)."""
    frame = scored.with_columns(pl.lit(1.0).alias("fleet_weight"))
    if not spare:
        return frame.drop("_failing")
    reporting = pl.len().over("ts")
    plain = (pl.col("oracle") == 0) & (pl.col("oracle_sign") == 0) & ~pl.col("_failing")
    rank = pl.int_range(1, pl.len() + 1).over("ts", "_plain")  # in unit id order: the frame is sorted
    keep = ~pl.col("_plain") | (rank <= (reporting * share - 1e-9).ceil() + 1)
    marked = frame.sort("ts", "unit_id").with_columns(plain.alias("_plain")).with_columns(keep.alias("_keep"))
    kept = marked.filter("_keep").drop("_keep", "_plain", "_failing")
    rest = (
        marked.filter(~pl.col("_keep"))
        .group_by("ts")
        .agg(pl.len().cast(pl.Float64).alias("fleet_weight"))
        .select(
            pl.lit(REST).alias("unit_id"),
            "ts",
            pl.lit(None, pl.Float64).alias("oracle"),
            pl.lit(None, pl.Float64).alias("oracle_sign"),
            "fleet_weight",
        )
    )
    return pl.concat([kept, rest])


def oracle_rows(
    intervals: pl.DataFrame,
    failures: pl.DataFrame,
    start: date,
    end: date,
    share: float,
    *,
    chunk_days: int = 14,
    spare: bool = True,
) -> dict[str, pl.DataFrame]:
    """Per group (``all`` and each maker) the oracles' rows of the days ``start..end``
    (:func:`day_rows` at the largest ``share``).  The converter's canonical samples are
    expanded ``chunk_days`` at a time; a drive reports a day when it has a reading."""
    makers = intervals.group_by("serial_number").agg(pl.col("manufacturer").first().replace(converter.MAKERS))
    makers = makers.select(pl.col("serial_number").alias("unit_id"), pl.col("manufacturer").alias("maker"))
    groups = {"all": None, **{m: m for m in sorted(makers.get_column("maker").unique())}}
    parts: dict[str, list[pl.DataFrame]] = {g: [] for g in groups}
    lo, stop = start, end + timedelta(days=1)
    while lo < stop:
        hi = min(lo + timedelta(days=chunk_days), stop)
        samples = converter.expand(intervals, lo, hi)
        drive_days = samples.select("unit_id", "ts").unique().join(makers, on="unit_id", how="left")
        del samples
        scored = oracle_scores(drive_days, failures)
        for group, maker in groups.items():
            part = scored if maker is None else scored.filter(pl.col("maker") == maker)
            parts[group].append(day_rows(part.drop("maker"), share, spare))
        lo = hi
    return {g: pl.concat(p).sort("ts", "unit_id") for g, p in parts.items()}


def judge(rows: dict[str, pl.DataFrame], failures: pl.DataFrame, shares: list[float]) -> list[dict]:
    """Each oracle judged by the package's top-of-the-list metrics, per group and share;
    with each group's failures and how many show a sign."""
    from foreshock.budget import DailyBudget
    from foreshock.models.evaluation.top_of_list import top_of_list

    fails = failures.select("unit_id", "failed_at")
    out = []
    for group, frame in rows.items():
        first = frame.get_column("ts").min()
        last = frame.get_column("ts").max() + timedelta(days=1)
        units = frame.get_column("unit_id").unique().implode()
        judged = failures.filter(
            pl.col("unit_id").is_in(units) & (pl.col("failed_at") > first) & (pl.col("failed_at") <= last)
        )
        for share in shares:
            row = {"maker": group, "share": share, "failures": judged.height, "with_sign": int(judged["sign"].sum())}
            for oracle in ORACLES:
                scores = frame.select("unit_id", "ts", pl.col(oracle).alias("score"), "fleet_weight")
                metrics = top_of_list(scores, fails, DailyBudget(share=share), f"{HORIZON_DAYS}d", timedelta(days=1))
                row[oracle] = metrics.to_dict()
            out.append(row)
    return out


def _cell(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def render(results: list[dict], start: date, end: date) -> str:
    """One Markdown table per share: flags a day, each oracle's precision and recall
    (UPPER BOUNDS), the failures and how many show a sign."""
    lines = [
        f"Judged days {start} .. {end}; horizon {HORIZON_DAYS} d, lead >= {LEAD_DAYS} d. UPPER BOUNDS: "
        "the oracles see the future."
    ]
    for share in sorted({r["share"] for r in results}):
        lines += [
            f"\n### Top {share * 100:g} % of the drives reporting each day\n",
            "| maker | drives reporting a day | flags a day | oracle precision | oracle caught / failures (recall) "
            "| sign-only oracle precision | sign-only caught (recall) | failures with a sign |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in (r for r in results if r["share"] == share):
            o, s = r["oracle"], r["oracle_sign"]
            reporting = o["unit_days"] / o["days"] if o["days"] else 0.0
            lines.append(
                f"| {r['maker']} | {reporting:,.0f} | {o['flags_per_day']:.1f} | {_cell(o['precision'])} "
                f"| {o['caught']} / {o['failures']} ({_cell(o['recall'], 2)}) | {_cell(s['precision'])} "
                f"| {s['caught']} ({_cell(s['recall'], 2)}) | {r['with_sign']} of {r['failures']} |"
            )
    return "\n".join(lines)


def ceiling(data: Path, start: date, end: date, shares: list[float], chunk_days: int = 14) -> list[dict]:
    """The whole computation: read the start-stop file, find each failure's sign, build
    the oracles' rows and judge them."""
    intervals = pl.read_parquet(data)
    failures = shows_sign(intervals, failures_of(intervals))
    rows = oracle_rows(intervals, failures, start, end, max(shares), chunk_days=chunk_days)
    return judge(rows, failures, shares)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the start-stop Parquet file")
    parser.add_argument("--start", type=date.fromisoformat, default=START, help="first judged day")
    parser.add_argument("--end", type=date.fromisoformat, default=END, help="last judged day (inclusive)")
    parser.add_argument("--shares", type=float, nargs="+", default=list(SHARES))
    parser.add_argument("--chunk-days", type=int, default=14, help="days of samples expanded at a time")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    wall = time.perf_counter()
    results = ceiling(args.data, args.start, args.end, args.shares, args.chunk_days)
    print(render(results, args.start, args.end))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"\nwall {time.perf_counter() - wall:.1f} s, CPU {usage.ru_utime + usage.ru_stime:.1f} s, "
        f"peak RSS {usage.ru_maxrss / 1024:.0f} MB ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
