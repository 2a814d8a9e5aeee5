"""Prometheus JSON matrices read by Polars (``prometheus_json._polars_matrix``) or whole
by Python (``_plain_matrix``) stage the same rows, reasons and raw texts as the
series-by-series loop, for plain documents and for the odd ones they hand on (times that
are floats, texts or beyond 64 bits, values that are numbers, labels that are not texts or
named twice, malformed samples, escapes Polars decodes otherwise)."""

from __future__ import annotations

import copy
import json
import random

import pytest

import foreshock.ingest.parsers.prometheus_json as pj
from foreshock.config import load_config
from foreshock.ingest.context import IngestContext

SERIES = [
    {
        "metric": {"__name__": name, "gpu": str(g), "Hostname": f"gpu-node00{n}", "UUID": f"GPU-{n}{g}"},
        "values": [[1793491200 + 3600 * k, str(k * (g + 1))] for k in range(4)],
    }
    for name in ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_XID_ERRORS", "NOT_A_METRIC")
    for n in range(2)
    for g in range(2)
]


def _odd(change) -> list:
    series = copy.deepcopy(SERIES)
    change(series)
    return series


CASES = {
    "plain": SERIES,
    "float time": _odd(lambda s: s[1]["values"][2].__setitem__(0, 1793498400.25)),
    "text time": _odd(lambda s: s[1]["values"][2].__setitem__(0, "1793498400")),
    "true time": _odd(lambda s: s[1]["values"][2].__setitem__(0, True)),
    "time beyond 64 bits": _odd(lambda s: s[1]["values"][2].__setitem__(0, 2**64)),
    "number value": _odd(lambda s: s[2]["values"][0].__setitem__(1, 7)),
    "gpu label a number": _odd(lambda s: s[3]["metric"].__setitem__("gpu", 1)),
    "no hostname": _odd(lambda s: s[3]["metric"].pop("Hostname")),
    "sample of three": _odd(lambda s: s[0]["values"].__setitem__(1, [1, "2", 3])),
    "no values": _odd(lambda s: s[0].pop("values")),
    "labels a list": _odd(lambda s: s[4].__setitem__("metric", ["x"])),
}


def _outcome(path, ctx, monkeypatch, way: str):
    """``path`` parsed with the ways before ``way`` switched off (polars, whole, series):
    each table with its rows' raw texts, or the error."""
    with monkeypatch.context() as patch:
        if way in ("whole", "series"):
            patch.setattr(pj, "_polars_matrix", lambda text: None)
        if way == "series":
            patch.setattr(pj, "_plain_matrix", lambda result: None)
        try:
            parsed = pj.parse(path, ctx)
        except Exception as exc:  # noqa: BLE001 - compared
            return type(exc).__name__, str(exc)
    return {table: (frame, parsed.raw_text(frame)) for table, frame in parsed.tables.items()}


def _same(first, second) -> bool:
    if not isinstance(first, dict) or not isinstance(second, dict):
        return first == second
    return first.keys() == second.keys() and all(
        frame.equals(second[table][0]) and raw.equals(second[table][1]) for table, (frame, raw) in first.items()
    )


def _document(result: list, **dumps) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}, **dumps)


@pytest.fixture
def ctx(tmp_path):
    config = load_config(data_dir=tmp_path / "data").with_overrides({"ingest": {"timezone": "UTC"}})
    return IngestContext.from_config(config)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_plain_matrix_read_whole_is_read_as_series_by_series(tmp_path, monkeypatch, ctx, case):
    for layout in ({"separators": (",", ":")}, {}, {"indent": 1}):
        path = tmp_path / "export.json"
        path.write_text(_document(CASES[case], **layout))
        by_polars, whole, by_series = (_outcome(path, ctx, monkeypatch, way) for way in ("polars", "whole", "series"))
        assert by_polars.keys() == {"samples", "events"}
        assert _same(by_polars, by_series) and _same(whole, by_series), (case, layout)
        assert by_polars["samples"][0].get_column("_reason").null_count() < by_polars["samples"][0].height
        if case in ("plain", "no hostname"):  # read by Polars (any layout), the others not
            assert pj._polars_matrix(path.read_text()) is not None, layout
        else:
            assert pj._polars_matrix(path.read_text()) is None, layout


NAMES = '"__name__":"DCGM_FI_DEV_XID_ERRORS","gpu":"0","Hostname":"gpu-node001","UUID":"GPU-1"'


def _series(labels: str = NAMES, value: str = '"0"', time: str = "1793491200") -> str:
    return '{"metric":{' + labels + '},"values":[[' + time + "," + value + '],[1793494800,"1"]]}'


def _matrix(*series: str) -> str:
    return '{"status":"success","data":{"resultType":"matrix","result":[' + ", ".join(series) + "]}}\n"


# Documents as text (what json.dumps does not write), read by Polars or handed on.
TEXTS = {
    "escapes": (_series(NAMES + r',"job":"a\"b\\c\/d\u00e9\n\"gpu\":"', r'"\u0037"'), True),
    "a label named twice": (_series('"gpu":"7",' + NAMES), False),
    "__name__ named twice": (_series(NAMES + ',"__name__":"NOT_A_METRIC"'), False),
    "a surrogate escaped": (_series(value=r'"\ud800"'), False),
    "a null label": (_series(NAMES + ',"job":null'), False),
    "a true value": (_series(value="true"), False),
    "a time with an exponent": (_series(time="1.7934912e9"), False),
    "a time of 19 digits": (_series(time="1793491200000000000"), False),
    "a time with leading zeros": (_series(time="01793491200"), False),
    "no series": ("", True),
}


@pytest.mark.parametrize("case", sorted(TEXTS))
def test_a_matrix_read_by_polars_is_read_as_by_python(tmp_path, monkeypatch, ctx, case):
    series, read_by_polars = TEXTS[case]
    path = tmp_path / "export.json"
    path.write_text(_matrix(series, series) if series else _matrix())
    assert (pj._polars_matrix(path.read_text()) is not None) == read_by_polars
    by_polars, by_series = (_outcome(path, ctx, monkeypatch, way) for way in ("polars", "series"))
    assert _same(by_polars, by_series)


def test_odd_texts_read_by_polars_are_read_as_by_python():
    """Random labels and values of escapes, quotes, colons and label names: a document
    read by Polars gives every series' labels, times and values as Python's json does."""
    rng = random.Random(6)
    pieces = ["a", "é", '\\"', "\\\\", "\\/", "\\n", "\\u0041", "\\u0000", "\\uffff", "日", ":", ",", '\\"gpu\\":']

    def text() -> str:
        return '"' + "".join(rng.choice(pieces) for _ in range(rng.randint(0, 5))) + '"'

    read = 0
    for _ in range(60):
        series = []
        for _ in range(rng.randint(0, 3)):
            keys = rng.sample(["__name__", "gpu", "Hostname", "UUID", "job"], rng.randint(0, 5))
            keys += keys[:1] if rng.random() < 0.1 else []
            labels = ",".join(f'"{key}":{text()}' for key in keys)
            times = [
                rng.choice(["0", "-0", "1793491200", "-5", "999999999999999999"]) for _ in range(rng.randint(0, 3))
            ]
            points = ",".join(f"[{time}, {text()}]" for time in times)
            series.append(f'{{"metric":{{{labels}}},"values":[{points}]}}')
        document = _matrix(*series)
        frame = pj._polars_matrix(document)
        if frame is None:
            continue
        read += 1
        expected = [
            (line, *(labels.get(k) for k in ("__name__", *pj.LABELS)), str(time), value)
            for line, (labels, values) in enumerate(
                ((s["metric"], s["values"]) for s in json.loads(document)["data"]["result"]), 1
            )
            for time, value in values
        ]
        assert frame.rows() == expected, document
    assert read > 40
