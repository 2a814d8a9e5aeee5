"""The ``publish`` flow: :func:`foreshock.pipelines.cycle_steps.publish_outbox` as a
Prefect task, plus the top of the new risk list as a markdown artifact on the run, for runs
a Prefect API records (``foreshock serve``'s cycle, the demo, ``foreshock publish`` with
``PREFECT_API_URL`` set). Flow and task take plain values (settings, paths as text) so a
deployment can run them.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from foreshock.pipelines.cycle_steps import publish_outbox

# The step itself as a Prefect task (same signature: plain values in, the outbox path out).
write_outbox = task(publish_outbox, name="write_outbox", cache_policy=NO_CACHE)


@flow(name="publish", log_prints=True, validate_parameters=False)
def publish_flow(
    settings: dict,
    scores_path: str | None = None,
    node_states_path: str | None = None,
    model: str | None = None,
    allow_stale: bool = False,
) -> str:
    directory = write_outbox(settings, scores_path, node_states_path, model, allow_stale)
    _attach_risk_list(directory)
    return directory


def _attach_risk_list(directory: str, top: int = 20) -> None:
    """The top of the new risk list as a markdown artifact on this flow run (Prefect UI)."""
    from prefect.artifacts import create_markdown_artifact

    from foreshock.drain.outbox import format_top
    from foreshock.drain.outbox_files import read_published_list

    risk_list = read_published_list(directory)
    markdown = f"# foreshock risk list {Path(directory).name}\n\n```\n{format_top(risk_list, top)}\n```\n\noutbox: `{directory}`\n"
    create_markdown_artifact(markdown=markdown, key="foreshock-risk-list", description=f"top {top} of {directory}")
