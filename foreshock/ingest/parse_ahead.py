"""The parse-ahead: a run's next batch parsed on a thread while the current one is checked
and merged (``[ingest] parse_ahead``; on the local runner only).

One batch at most is held, in a module-level cache keyed by run, batch number and the files'
contents, so only the call for exactly those files takes it.  Only batches whose parse
cannot depend on what the batch before stores are parsed ahead (:func:`may_parse_ahead`),
but for the files whose parse says it read stored rows (``ParsedFile.reads_lake``: a DCGM
XID gauge held at the file's start), which are parsed again in the batch's turn.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import replace
from datetime import datetime

from foreshock.config import Config
from foreshock.ingest.context import IngestContext
from foreshock.ingest.parsers import LAKE_FREE_FORMATS, PARSE_AHEAD_FORMATS
from foreshock.ingest.parsing import ParsedBatch, parse_batch, parse_stage, report_outcome
from foreshock.ingest.planning import PlannedFile
from foreshock.ingest.report import FileReport
from foreshock.ingest.staged import ParsedFile, conform_staged, own_tables
from foreshock.lake.read import read_table

# The next batch of a run, parsed ahead on a thread while the current one is checked and
# merged (at most one: starting one drops any other).  Keyed by run, batch number and the
# files' contents, so only the call for exactly those files takes it; with whether it was
# parsed while the batch before stored an inventory.
_prefetched: dict[tuple, tuple[Future, bool]] = {}
_prefetch_lock = threading.Lock()


def may_parse_ahead(files: list[PlannedFile], next_files: list[PlannedFile]) -> bool:
    """Whether ``next_files`` parse the same before and after ``files`` are stored: their
    parsers read nothing of the lake, or this batch changes no inventory and their parsers
    read nothing else of the lake."""
    if all(f.format in LAKE_FREE_FORMATS for f in next_files):
        return True
    return not any(f.inventory for f in files) and all(f.format in PARSE_AHEAD_FORMATS for f in next_files)


def _prefetch_key(run_id: str, batch_number: int, files: list[PlannedFile]) -> tuple:
    return (run_id, batch_number, tuple((f.path_hex or f.path, f.sha256) for f in files))


def prefetch(
    run_id: str,
    batch_number: int,
    files: list[PlannedFile],
    config: Config,
    catalog_path: str | None,
    timezone_name: str | None,
    scrape_time: datetime | None,
    stale_inventory: bool = False,
) -> None:
    """Start parsing ``files`` (batch ``batch_number`` of the run) on a thread.

    Only for batches :func:`may_parse_ahead` allows: their parsers read nothing of the
    lake but an inventory no batch changes meanwhile, or nothing at all; the checks that
    read stored telemetry (counter steps) run in the batch's own turn.
    ``stale_inventory``: the batch before stores an inventory while this one is parsed,
    so the taker reads it again for the checks.  An error (``OSError``) is raised by the
    call that takes the batch, as if it had parsed it itself.  The memory of one more
    parsed batch is the price.
    """
    future: Future = Future()
    with _prefetch_lock:
        _prefetched.clear()
        _prefetched[_prefetch_key(run_id, batch_number, files)] = (future, stale_inventory)

    def parse() -> None:
        try:
            future.set_result(parse_stage(files, config, catalog_path, timezone_name, scrape_time, ahead=True))
        except BaseException as exc:  # noqa: BLE001 - raised again by the taker
            future.set_exception(exc)

    threading.Thread(target=parse, name=f"ingest-prefetch-{batch_number}", daemon=True).start()


def take_prefetched(run_id: str, batch_number: int, files: list[PlannedFile]) -> ParsedBatch | None:
    """The batch parsed ahead for exactly these files, or None.  Parsed while the batch
    before stored an inventory, its context gets the inventory stored now (the checks read
    it; its parse did not, see :func:`may_parse_ahead`)."""
    with _prefetch_lock:
        entry = _prefetched.pop(_prefetch_key(run_id, batch_number, files), None)
    if entry is None:
        return None
    future, stale_inventory = entry
    batch = future.result()
    batch.ctx = replace(batch.ctx, ahead=False, _lookups=dict(batch.ctx._lookups))  # this batch's turn now
    if stale_inventory:
        batch.ctx = replace(batch.ctx, inventory=read_table(batch.ctx.lake_dir, "inventory"), _lookups={})
    _parse_again_in_turn(batch, files)
    return batch


def _parse_again_in_turn(batch: ParsedBatch, files: list[PlannedFile]) -> None:
    """Parse again, now, the files of ``batch`` whose parse ahead needed stored rows (it did
    not read them: the batch before may still have been storing; :attr:`IngestContext.ahead`):
    their rows and reports are then those of a parse in the batch's turn.  A file that says
    which of its tables depend on the lake (:attr:`ParsedFile.in_turn`) has only those
    staged again."""
    again = sorted(i for i, parsed in batch.parsed.items() if parsed.reads_lake)
    outcomes: dict[int, ParsedFile | Exception] = {}
    for i in [i for i in again if batch.parsed[i].in_turn is not None]:
        outcomes[i] = _restage_in_turn(batch.parsed[i], batch.ctx)
    rest = [i for i in again if i not in outcomes]
    if rest:
        parsed, shared = parse_batch([files[i] for i in rest], batch.ctx, 1, rest)
        own_tables(parsed, shared)  # a batch parser's rows, as the file's own
        outcomes.update(parsed)
    for i in again:
        batch.reports[i] = FileReport(files[i].path, files[i].format, "ingested")
        outcome = report_outcome(batch.reports[i], outcomes[i])
        if outcome is None:
            del batch.parsed[i]
        else:
            batch.parsed[i] = outcome


def _restage_in_turn(parsed: ParsedFile, ctx: IngestContext) -> ParsedFile | Exception:
    """``parsed`` with the tables its :attr:`~ParsedFile.in_turn` stages with ``ctx`` (a
    parse's error, as :func:`parse_batch` reports it: ``OSError`` propagates)."""
    try:
        tables = parsed.in_turn(ctx)
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - the file's rejection, as a parse in turn would report it
        return exc
    parsed.tables.update({table: conform_staged(frame, table) for table, frame in tables.items()})
    parsed.in_turn = None
    return parsed


def drop_prefetched() -> None:
    """Forget a batch parsed ahead that no call took (a run that stopped early)."""
    with _prefetch_lock:
        _prefetched.clear()
