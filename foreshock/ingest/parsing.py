"""A batch's files parsed into staged rows, with each file's outcome in its report.

Files of a format with a batch parser (nvidia-smi: a node's file per day) are parsed
together, one frame for several files instead of one per file; the others one by one.
Every staged row carries its file's index in the batch (``_file``): rows of the same key
are kept in file order (the first is the one kept), and quarantined rows are traced to
their file.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from foreshock.catalog import Catalog, load_catalog
from foreshock.config import Config
from foreshock.ingest.context import IngestContext
from foreshock.ingest.parsers import BATCH_PARSERS, PARSERS
from foreshock.ingest.planning import PlannedFile
from foreshock.ingest.report import FileReport
from foreshock.ingest.staged import ParsedFile, UnreadableFile, file_counts


def load_run_catalog(config: Config, catalog_path: str | None) -> Catalog:
    """The configured catalog, with a landing directory's ``catalog.yaml`` merged over it."""
    if not catalog_path:
        return config.catalog
    extra = load_catalog(catalog_path)
    return Catalog(
        metrics={**config.catalog.metrics, **extra.metrics}, source=f"{config.catalog.source} + {catalog_path}"
    )


def parse_again(
    files: list[PlannedFile],
    bad_rows: list[tuple[str, pl.DataFrame]],
    parsed: dict[int, ParsedFile],
    ctx: IngestContext,
    config: Config,
) -> dict[int, ParsedFile]:
    """The files with quarantined rows that were not parsed in this process (but by
    ``parse`` tasks), parsed here: the quarantine shows each row's raw text, which only
    the parsed file knows (:meth:`ParsedFile.raw_text`).  Usually none."""
    missing = sorted({i for _, bad in bad_rows for i in file_counts(bad)} - set(parsed))
    if not missing:
        return {}
    outcomes, _ = parse_batch([files[i] for i in missing], ctx, config.local_workers, missing)
    for i in missing:
        if not isinstance(outcomes[i], ParsedFile):  # a worker parsed it: it differs here
            raise RuntimeError(
                f"{files[i].path}: parsed by a task but not in this process ({outcomes[i]}); "
                "is the landing directory on a file system both see, at the same path?"
            )
    return outcomes


@dataclass
class ParsedBatch:
    """A batch after parsing: its context, file reports, parsed files and shared frames."""

    ctx: IngestContext
    reports: list[FileReport]
    parsed: dict[int, ParsedFile]
    shared: dict[str, list[pl.DataFrame]]


def parse_stage(
    files: list[PlannedFile],
    config: Config,
    catalog_path: str | None,
    timezone_name: str | None,
    scrape_time: datetime | None,
    indices: list[int] | None = None,
    ahead: bool = False,
) -> ParsedBatch:
    """A batch's context (with the lake's inventory as it is now) and its files parsed;
    only the files ``indices`` lists, if given (the others are parsed by ``parse`` tasks,
    which fill in their reports).  ``ahead``: parsed ahead of the batch's turn
    (:attr:`IngestContext.ahead`; the taker parses again the files that need the lake)."""
    ctx = IngestContext.from_config(
        config, catalog=load_run_catalog(config, catalog_path), timezone_name=timezone_name, scrape_time=scrape_time
    )
    ctx.ahead = ahead
    reports = [FileReport(f.path, f.format, "ingested") for f in files]
    if indices is None:
        indices = list(range(len(files)))
    outcomes, shared = parse_batch([files[i] for i in indices], ctx, config.local_workers, indices)
    parsed: dict[int, ParsedFile] = {}
    for index in indices:
        outcome = report_outcome(reports[index], outcomes[index])
        if outcome is not None:
            parsed[index] = outcome
    return ParsedBatch(ctx, reports, parsed, shared)


def report_outcome(report: FileReport, outcome: ParsedFile | Exception) -> ParsedFile | None:
    """A file's parse entered in its report (rejected and why, or its rows read and the
    parser's notes); the parsed file, or None when it was rejected."""
    if isinstance(outcome, UnreadableFile):
        report.status, report.reason = "rejected", str(outcome)
        return None
    if isinstance(outcome, Exception):  # a parser bug must not stop the other files
        first = str(outcome).splitlines()[0][:200] if str(outcome) else ""
        report.status, report.reason = "rejected", f"{type(outcome).__name__}: {first}"
        return None
    report.rows_read = outcome.rows
    if outcome.notes:
        report.reason = "; ".join(outcome.notes)
    return outcome


def parse_batch(
    files: list[PlannedFile], ctx: IngestContext, workers: int = 1, indices: list[int] | None = None
) -> tuple[dict[int, ParsedFile | Exception], dict[str, list[pl.DataFrame]]]:
    """Parse a batch's files: ``(per file index a ParsedFile or the error that rejects the
    file, frames staged for several files at once by table, with ``_file``)``.
    ``indices``: the index in the batch of each of ``files`` when they are some of its
    files (a ``parse`` task's run, the driver's share); by default their positions.

    Files of a format in ``BATCH_PARSERS`` are parsed together (one frame per header
    instead of one per file), in ``workers`` runs of consecutive files; the others one by
    one.  With several workers these parses run side by side on threads (a file-by-file
    parser in Python beside Polars work that releases the GIL); parsers only read the lake.
    ``OSError`` propagates (the flow retries the batch).
    """
    by_index = dict(zip(range(len(files)) if indices is None else indices, files, strict=True))
    outcomes: dict[int, ParsedFile | Exception] = {}
    shared: dict[str, list[pl.DataFrame]] = {}
    together: dict[str, list[int]] = {}
    single: list[int] = []
    for index, planned in by_index.items():
        if planned.format in BATCH_PARSERS:
            together.setdefault(planned.format, []).append(index)
        else:
            single.append(index)

    def parse_one(index: int) -> None:
        try:
            outcomes[index] = PARSERS[by_index[index].format](by_index[index].open_path(), ctx)
        except OSError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported as the file's rejection
            outcomes[index] = exc

    def parse_together(fmt: str, run_indices: list[int]) -> dict[str, list[pl.DataFrame]]:
        results, frames = BATCH_PARSERS[fmt]([by_index[i].open_path() for i in run_indices], run_indices, ctx)
        outcomes.update(results)
        return frames

    runs = []
    for fmt, indices_of_format in together.items():
        # More runs than workers when files are parsed one by one beside them (see below);
        # one or two such files (a tickets export) take a thread only briefly.
        per_worker = RUNS_PER_WORKER if len(single) >= max(workers, 2) else 1
        count = max(1, min(workers * per_worker, len(indices_of_format) // BATCH_PARSE_MIN_FILES))
        size = -(-len(indices_of_format) // count)
        runs += [(fmt, indices_of_format[k : k + size]) for k in range(0, len(indices_of_format), size)]
    if workers < 2 or len(runs) + len(single) < 2:
        for index in single:
            parse_one(index)
        staged = [(fmt, parse_together(fmt, run_indices)) for fmt, run_indices in runs]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            # The files parsed one by one (Prometheus JSON, kernel logs: partly Python holding
            # the GIL; a plain export is read by Polars) go first, in one task beside the
            # batch parsers' runs (Polars, which lets go of the GIL), so the two overlap;
            # spread over the threads after the runs, they left a core idle while they took
            # turns on the GIL.  The runs are smaller than a worker's
            # share so that the thread freed by the one-by-one files takes its part of them.
            if runs and single:
                singles = [pool.submit(lambda: [parse_one(index) for index in single])]
            else:
                singles = [pool.submit(parse_one, index) for index in single]
            pending = [(fmt, pool.submit(parse_together, fmt, run_indices)) for fmt, run_indices in runs]
            staged = [(fmt, future.result()) for fmt, future in pending]
            for future in singles:
                future.result()
    for _, by_table in staged:
        for table, frames in by_table.items():
            shared.setdefault(table, []).extend(frames)
    return outcomes, shared


# A format's batch parse is split into runs of at least this many files (one per worker, or
# RUNS_PER_WORKER per worker when other files are parsed one by one beside them).
BATCH_PARSE_MIN_FILES = 8
RUNS_PER_WORKER = 2


def table_frames(
    table: str, parsed: dict[int, ParsedFile], shared: dict[str, list[pl.DataFrame]]
) -> list[pl.DataFrame]:
    """A table's staged frames of parsed files, each row with its file's index (``_file``),
    for :func:`in_file_order`."""
    frames = [
        p.tables[table].with_columns(_file=pl.lit(i, dtype=pl.Int32)) for i, p in parsed.items() if table in p.tables
    ]
    return frames + shared.get(table, [])


def in_file_order(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """The staged frames as one, with rows of the same key in file order (the first is
    the one kept).  Frames covering disjoint ranges of files are concatenated in range
    order; a frame of several files lists each metric's rows file by file, so frames
    whose ranges interleave are sorted by file (stably)."""
    if len(frames) == 1:
        return frames[0]
    filled = [frame for frame in frames if frame.height]
    ranges = sorted(
        ((frame.get_column("_file").min(), frame.get_column("_file").max()), k) for k, frame in enumerate(filled)
    )
    staged = pl.concat(
        [filled[k] for _, k in ranges] + [frame for frame in frames if not frame.height], how="diagonal_relaxed"
    )
    if any(first[0][1] >= second[0][0] for first, second in zip(ranges, ranges[1:])):
        staged = staged.sort("_file", maintain_order=True)
    return staged
