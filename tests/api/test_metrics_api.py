"""GET /metrics on a real server (issue #20, point 1): readable under the rule of GraphQL reads,
in the Prometheus text format, with counters that move after a workflow runs."""

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from laneway.config import Settings
from tests.api.conftest import TOKEN, LiveServer, live_server, make_settings
from tests.api.test_waits_api import enqueue, until_status


def _value(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


async def test_metrics_show_the_counters_move(server: LiveServer) -> None:
    instance_id = await enqueue(server, "hello", {"name": "Metrics"})
    await until_status(server, instance_id, "completed")
    response = await server.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    text = response.text
    labels = {"workflow": "hello", "queue": "hello"}
    assert _value(text, "laneway_instances_completed_total", **labels) == 1
    assert _value(text, "laneway_instances_started_total", **labels) == 1
    assert (
        _value(text, "laneway_step_duration_seconds_count", workflow="hello", action="greet") == 1
    )
    assert _value(text, "laneway_instances", queue="hello", status="completed") == 1
    assert _value(text, "laneway_listener_connected") == 1
    assert _value(text, "laneway_subscribers") == 0


async def test_metrics_need_a_token_when_reads_do(database_url: str) -> None:
    settings: Settings = make_settings(database_url, api_tokens=(TOKEN,))
    async with live_server(settings) as secured:
        missing = await secured.client.get("/metrics")
        wrong = await secured.client.get("/metrics", headers={"authorization": "Bearer nope"})
        right = await secured.client.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert missing.status_code == 401
    assert missing.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert wrong.status_code == 403
    assert right.status_code == 200
    assert "laneway_claims_total" in right.text


README = Path(__file__).resolve().parents[2] / "README.md"


def _documented_series() -> dict[str, tuple[str, set[str]]]:
    """Every series named in the first column of README's Metrics tables: its type (a `_total`
    name is a counter, else what the row says, a gauge by default) and the labels the row
    names in its parentheses."""
    section = README.read_text().split("### Metrics", 1)[1].split("\n### ", 1)[0]
    documented = {}
    for line in section.splitlines():
        if not line.startswith("| `laneway_"):
            continue
        cell = line.split("|")[1]
        names = re.findall(r"`(laneway_[a-z_]+)`", cell)
        said = re.search(r"\((counter|gauge|histogram)", cell)
        labels = set(re.findall(r"`([a-z_]+)`", cell.partition("(")[2])) - set(names)
        for name in names:
            if name.endswith("_total"):
                documented[name.removesuffix("_total")] = ("counter", labels)
            else:
                documented[name] = (said.group(1) if said else "gauge", labels)
    return documented


async def test_metrics_serve_every_documented_series_with_its_type_and_labels(
    server: LiveServer,
) -> None:
    # An audit reads README's list, then scrapes: every series listed must be served as the
    # type the list gives, with the labels it names.
    instance_id = await enqueue(server, "hello", {"name": "Documented"})
    await until_status(server, instance_id, "completed")
    response = await server.client.get("/metrics")
    served = {family.name: family for family in text_string_to_metric_families(response.text)}
    documented = _documented_series()
    assert {"laneway_upkeep_failures", "laneway_instances_pruned", "laneway_prune_behind"} <= set(
        documented
    )
    for name, (kind, labels) in documented.items():
        assert name in served, f"{name} is documented, not served"
        assert served[name].type == kind, f"{name}: {served[name].type}, documented {kind}"
        for sample in served[name].samples:
            assert labels <= set(sample.labels), f"{name} lacks a label of {labels}"
    tasks = {s.labels["task"] for s in served["laneway_upkeep_failures"].samples}
    assert tasks == {"unregistered", "prune", "partitions", "queue_history"}
