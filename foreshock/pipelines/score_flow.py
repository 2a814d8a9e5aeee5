"""The ``score`` flow: :func:`foreshock.pipelines.cycle_steps.score_latest` as a Prefect task,
for runs a Prefect API records (``foreshock serve``'s cycle, the demo, ``foreshock score``
with ``PREFECT_API_URL`` set)."""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from foreshock.pipelines.cycle_steps import score_latest


@task(cache_policy=NO_CACHE)
def score_task(settings: dict) -> str:
    return score_latest(settings)


@flow(name="score", log_prints=True, validate_parameters=False)
def score_flow(settings: dict) -> str:
    return score_task(settings)
