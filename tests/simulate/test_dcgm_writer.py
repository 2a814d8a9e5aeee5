"""The DCGM exports are written node by node with bounded memory, same bytes as at once."""

from __future__ import annotations

import json

import pytest

from foreshock.simulate.dcgm_formats import DCGM_JSON_METRICS, DcgmWriter

DAYS = ["2026-11-01", "2026-11-02"]
METRIC = DCGM_JSON_METRICS[0]


def _series(node: int) -> dict[tuple[str, str], list[str]]:
    """One node's series: two GPUs on the first day, one on the second."""

    def one(gpu: int, day: str) -> str:
        labels = {"__name__": METRIC, "Hostname": f"node{node}", "gpu": str(gpu)}
        return json.dumps({"metric": labels, "values": [[1, f"{node}{gpu}"]]}, separators=(",", ":"))

    return {(DAYS[0], METRIC): [one(0, DAYS[0]), one(1, DAYS[0])], (DAYS[1], METRIC): [one(0, DAYS[1])]}


@pytest.mark.parametrize("buffer_chars", [1, 10**9])
def test_every_node_lands_in_one_valid_response_per_day_and_metric(tmp_path, buffer_chars):
    writer = DcgmWriter(tmp_path, DAYS, buffer_chars=buffer_chars)
    for node in range(3):
        writer.add(_series(node))
    files, size = writer.close()
    assert files == len(DAYS) * len(DCGM_JSON_METRICS)
    written = sorted(tmp_path.glob("dcgm/*/*.json"))
    assert len(written) == files and size == sum(p.stat().st_size for p in written)
    first = json.loads((tmp_path / "dcgm" / DAYS[0] / f"{METRIC}.json").read_text())
    assert first["status"] == "success" and first["data"]["resultType"] == "matrix"
    # Node order kept: node 0's two GPUs, then node 1's, then node 2's.
    assert [(r["metric"]["Hostname"], r["metric"]["gpu"]) for r in first["data"]["result"]] == [
        (f"node{n}", str(g)) for n in range(3) for g in range(2)
    ]
    # A metric no node reported is still a valid, empty response.
    empty = json.loads((tmp_path / "dcgm" / DAYS[1] / f"{DCGM_JSON_METRICS[1]}.json").read_text())
    assert empty["data"]["result"] == []


def test_flushing_often_writes_the_same_bytes_as_writing_once(tmp_path):
    for name, buffer_chars in (("often", 1), ("once", 10**9)):
        writer = DcgmWriter(tmp_path / name, DAYS, buffer_chars=buffer_chars)
        for node in range(3):
            writer.add(_series(node))
        writer.close()
    for path in sorted((tmp_path / "once").rglob("*.json")):
        assert path.read_bytes() == (tmp_path / "often" / path.relative_to(tmp_path / "once")).read_bytes()
