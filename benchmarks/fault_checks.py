"""What the fault-injection harness checks after a kill and after the rerun.

* :func:`stale_locks`: every writer lock (``.lock``, an ``flock``) under the data directory
  can be taken at once;
* :func:`partial_files`: every visible Parquet and JSON file reads (a partial write is never
  visible under its final name);
* :func:`leftovers`: after the rerun, no temp file (``.<name>.tmp-<pid>``), no publish
  staging directory, no ingest or features staging area and no fetched pull file is left;
* :func:`compare`: the rerun's output of a stage equals the unkilled run's.
"""

from __future__ import annotations

import fcntl
import json
import re
import shutil
from pathlib import Path

import polars as pl
from polars.testing import assert_frame_equal

LAKE_TABLES = ("inventory", "samples", "events", "failures")
TEMP_NAME = re.compile(r"^\..+\.tmp-\d+(?:-\d+)?$")  # foreshock.lake.atomic's temp names


def stale_locks(data: Path) -> list[str]:
    """The writer locks under ``data`` that cannot be taken at once."""
    stale = []
    for lock in data.rglob(".lock"):
        if "mlflow" in lock.relative_to(data).parts:
            continue
        with open(lock, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                stale.append(str(lock.relative_to(data)))
                continue
            fcntl.flock(handle, fcntl.LOCK_UN)
    return stale


def partial_files(data: Path) -> list[str]:
    """Visible files a reader would take for complete but that do not read."""
    bad = []
    for path in data.rglob("*"):
        if not path.is_file() or any(part.startswith(".") for part in path.relative_to(data).parts):
            continue
        if "mlflow" in path.relative_to(data).parts:
            continue  # MLflow's own store
        try:
            if path.suffix == ".parquet":
                pl.read_parquet(path)
            elif path.suffix == ".json":
                json.loads(path.read_text())
        except Exception as exc:  # noqa: BLE001 - any failure to read is the finding
            bad.append(f"{path.relative_to(data)}: {type(exc).__name__}")
    return bad


def leftovers(data: Path) -> list[str]:
    """What a finished run should not leave behind (checked after the rerun)."""
    found = []
    for path in data.rglob("*"):
        relative = path.relative_to(data)
        if "mlflow" in relative.parts:
            continue
        if TEMP_NAME.match(path.name) or (path.is_dir() and path.name.startswith(".staging-")):
            found.append(str(relative))
    for area in ("staging/ingest", "features/_staging", "pull"):
        directory = data / area
        if directory.is_dir():
            found += [str(p.relative_to(data)) for p in directory.iterdir() if p.is_dir()]
    return found


def _table(paths: list[Path]) -> pl.DataFrame:
    if not paths:
        return pl.DataFrame()
    frame = pl.concat([pl.read_parquet(p) for p in paths], how="diagonal_relaxed")
    return frame.sort(frame.columns)


def _same(label: str, clean: pl.DataFrame, trial: pl.DataFrame, drop: tuple[str, ...] = ()) -> list[str]:
    clean = clean.drop([c for c in drop if c in clean.columns])
    trial = trial.drop([c for c in drop if c in trial.columns])
    try:
        assert_frame_equal(clean, trial, check_exact=False, rel_tol=1e-6, abs_tol=1e-9, check_column_order=False)
    except AssertionError as exc:
        return [f"{label}: {str(exc).splitlines()[0][:200]}"]
    return []


def _sortable(frame: pl.DataFrame) -> list[str]:
    return [c for c, t in frame.schema.items() if t.is_numeric() or t in (pl.String, pl.Datetime, pl.Date, pl.Boolean)]


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(_sortable(frame))


def compare_lake(clean: Path, trial: Path, manifest: bool) -> list[str]:
    """The lake's tables (and, for a file ingest, the manifest's files) are the same."""
    found: list[str] = []
    for table in LAKE_TABLES:
        c, t = (_table(sorted((root / "lake" / table).rglob("part.parquet"))) for root in (clean, trial))
        found += _same(f"lake {table}", c, t)
    if manifest:

        def listed(root: Path) -> set:
            return set(pl.read_parquet(root / "lake" / "_manifest.parquet").select("sha256", "context").iter_rows())

        if listed(clean) != listed(trial):
            found.append("ingest manifest lists other files")
    return found


def compare(stage: str, clean: Path, trial: Path, published_before: bool = False) -> list[str]:
    """What differs between the clean run's output of ``stage`` and the trial's.

    ``published_before``: the killed publish got as far as a complete outbox, so the
    rerun's diff is rightly against it; only the risk list is compared then."""
    if stage in ("ingest", "pull"):
        # a resumed pull fetches other chunks than an unkilled one: only the rows must agree
        return compare_lake(clean, trial, manifest=stage == "ingest")
    if stage == "features":

        def paths(root: Path) -> list[Path]:
            return sorted(p for p in (root / "features").rglob("part.parquet") if "_staging" not in p.parts)

        c = _table(paths(clean))
        t = _table(paths(trial))
        return _same("features", c, t.select(c.columns) if c.width and set(c.columns) <= set(t.columns) else t)
    if stage in ("backtest", "score"):
        path = ("backtest", "scores.parquet") if stage == "backtest" else ("scores", "latest.parquet")
        c, t = (pl.read_parquet(root.joinpath(*path)) for root in (clean, trial))
        return _same(f"{stage} scores", _sorted(c), _sorted(t), drop=("scored_at",))
    if stage in ("train", "review"):
        return compare_registry(stage, clean, trial)
    if stage == "publish":
        return _compare_outbox(clean, trial, published_before)
    if stage == "replay":
        return _compare_replay(clean, trial)
    if stage == "report":
        return _compare_page(clean, trial)
    raise ValueError(stage)


def _compare_outbox(clean: Path, trial: Path, published_before: bool) -> list[str]:
    found = []
    for name in ("risk_list.parquet",) if published_before else ("risk_list.parquet", "diff.csv"):
        c, t = (latest_outbox(root) / name for root in (clean, trial))
        if not t.exists():
            found.append(f"publish: newest outbox has no {name}")
            continue
        read = pl.read_parquet if name.endswith(".parquet") else pl.read_csv
        cf, tf = read(c), read(t)
        volatile = tuple(x for x in cf.columns if x.endswith("_at") or x in ("published", "generated"))
        found += _same(f"outbox {name}", _sorted(cf), _sorted(tf), drop=volatile)
    return found


def latest_outbox(root: Path) -> Path:
    outbox = root / "outbox"
    latest = outbox / "LATEST"
    if latest.exists():
        return outbox / latest.read_text().strip()
    return outbox / "missing"


def _compare_replay(clean: Path, trial: Path) -> list[str]:
    directory = Path("reports") / "replay"
    found = []
    c, t = (json.loads((root / directory / "replay.json").read_text()) for root in (clean, trial))
    if c != t:
        found.append(f"replay.json differs in {sorted(k for k in c if c.get(k) != t.get(k))[:5]}")
    drains = [root / directory / "replay_drains.csv" for root in (clean, trial)]
    if drains[0].is_file():
        found += _same("replay drains", *(_sorted(pl.read_csv(p)) for p in drains))
    return found


# What a page says about the time it was made: "Generated 2026-12-05 20:51 UTC", and the
# freshness table's ages at that time ("20d21h", "3h05m", "56s": foreshock.reporting's human_age).
GENERATED = re.compile(r"Generated [^<]*")
AGE_CELL = re.compile(r"<td([^>]*)>(?:\d+d\d{2}h|\d+h\d{2}m|\d+m|\d+s)</td>")


SVG = re.compile(r"<svg.*?</svg>", re.S)  # matplotlib's plots: random element ids each run
ROW = re.compile(r"<tr>.*?</tr>", re.S)


def _compare_page(clean: Path, trial: Path) -> list[str]:
    """The page's text and table rows (in any order: rows that tie on the sort key, such as
    one unit's events, come out in either order on any run) without its times and plots."""

    def page(root: Path) -> tuple[str, list[str]]:
        text = GENERATED.sub("", (root / "reports" / "fleet.html").read_text())
        text = SVG.sub("<svg/>", AGE_CELL.sub(r"<td\1>age</td>", text))
        return ROW.sub("<tr/>", text), sorted(ROW.findall(text))

    c, t = page(clean), page(trial)
    return [] if c == t else ["report: fleet.html differs beyond its generation time"]


def compare_registry(stage: str, clean: Path, trial: Path) -> list[str]:
    """The model registry: the challenger (and after review the champion) is a version from
    a finished run with the clean run's metrics, and review reached the same decision."""
    c, t = registry_state(clean), registry_state(trial)
    found = []
    for key in ("challenger", "champion", "review") if stage == "review" else ("challenger",):
        if (c[key] is None) != (t[key] is None):
            found.append(f"{stage}: {key} {'missing' if t[key] is None else 'unexpected'} after the rerun")
        elif c[key] is not None and not _close(c[key], t[key]):
            found.append(f"{stage}: {key} differs: {_difference(c[key], t[key])}")
    if t["challenger"] is not None and t["challenger"][0] != "FINISHED":
        found.append(f"{stage}: the challenger's run is {t['challenger'][0]}")
    return found


def registry_state(root: Path) -> dict:
    """The registry of the data directory ``root`` (:func:`read_registry`), read from a copy
    of its store at a path never read before.

    MLflow keeps one store per tracking URI for the life of a process, and its pooled SQLite
    connection goes on reading the file it opened after that file is deleted.  Every trial
    runs at the same path, restored from a copy each time, so a read at that path saw the
    registry of the first trial read there (a review's, whose challenger carries the
    review's tag): "challenger differs" after every later train, whatever the train had
    done, and nothing checked after the first read.
    """
    import tempfile

    store = Path(root) / "mlflow"
    with tempfile.TemporaryDirectory(prefix="registry-") as tmp:
        copy = Path(tmp) / "mlflow"
        copy.mkdir()
        for path in store.glob("mlflow.db*"):  # with a killed writer's journal, if any
            shutil.copy2(path, copy / path.name)
        return read_registry(Path(tmp))


def read_registry(root: str | Path) -> dict:
    """Challenger and champion (their run's status and metrics, the version's review tag)
    and the newest finished review (metrics, decision) of the store under ``root``."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{Path(root) / 'mlflow' / 'mlflow.db'}")
    out: dict = {}
    for alias in ("challenger", "champion"):
        try:
            version = client.get_model_version_by_alias("foreshock-risk", alias)
        except Exception:  # noqa: BLE001 - an absent alias is part of the state
            out[alias] = None
            continue
        run = client.get_run(version.run_id)
        out[alias] = (run.info.status, run.data.metrics, version.tags.get("foreshock.review"))
    reviews = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        "tags.`foreshock.kind` = 'review' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    out["review"] = (reviews[0].data.metrics, reviews[0].data.tags.get("foreshock.decision")) if reviews else None
    return out


def _difference(clean: list, trial: list) -> str:
    """What differs between two registry entries (status / metrics / tag tuples), briefly."""
    parts = []
    for c, t in zip(clean, trial):
        if isinstance(c, dict) and isinstance(t, dict):
            names = sorted(k for k in c.keys() | t.keys() if k not in c or k not in t or not _close(c[k], t[k]))
            if names:
                parts.append(f"{len(names)} metrics, e.g. {names[:3]}")
        elif not _close(c, t):
            parts.append(f"{c!r} vs {t!r}")
    return "; ".join(parts)


def _close(a: object, b: object) -> bool:
    """Equal, with floats equal to a relative 1e-6 (metrics, nested in tuples and dicts)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or abs(a - b) <= 1e-6 * max(1.0, abs(a)) or (a != a and b != b)
    return a == b
