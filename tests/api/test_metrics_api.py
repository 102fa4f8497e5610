"""GET /metrics on a real server (issue #20, point 1): readable under the rule of GraphQL reads,
in the Prometheus text format, with counters that move after a workflow runs."""

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
