"""What an operator sees of every request (issue 53.4): one access-log line each, with the
call id and no key; /metrics labels for unknown paths that stay bounded; a 404 that names the
path and lists the routes served."""

from __future__ import annotations

import logging

import pytest

from gateway.metrics import unmatched_label
from tests.unit.gateway.conftest import ADMIN, ADMIN_KEY

CHAT = [{"role": "user", "content": "hi"}]


async def test_every_request_is_one_access_line_with_its_call_id_and_no_key(gw, caplog):
    rollout = await gw.new_rollout()
    caplog.set_level(logging.INFO, logger="gateway.access")
    caplog.clear()
    reply = await gw.sdk(rollout).chat.completions.with_raw_response.create(
        model="m", messages=CHAT, max_tokens=1
    )
    call_id = reply.headers["x-forge-call-id"]
    await gw.http.post("/v1/nowhere", headers=ADMIN)
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.access"]
    path = f"/rollouts/{rollout['rollout_id']}/v1/chat/completions"
    assert lines[0].startswith(f"POST {path} 200 ") and lines[0].endswith(f"call={call_id}")
    assert lines[1].startswith("POST /v1/nowhere 404 ")
    assert len(lines) == 2
    for line in lines:
        assert rollout["api_key"] not in line and ADMIN_KEY not in line


async def test_a_404_names_the_path_and_the_routes_served(gw):
    response = await gw.http.post("/rollouts/abc/v1/embeddings?x=1", headers=ADMIN)
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "POST /rollouts/abc/v1/embeddings" in error["message"]
    for route in ("POST /v1/chat/completions", "POST /v1/completions", "GET /v1/models",
                  "POST /v1/messages", "POST /v1/messages/count_tokens", "POST /v1/responses",
                  "POST /rollouts"):  # fmt: skip
        assert route in error["message"]


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("/rollouts/ab12cd/v1/messages", "unmatched:/rollouts/{rollout_id}/v1/messages"),
        ("/v1/responses", "unmatched:/v1/responses"),
        ("/v1/files/file-9F3a0/content/extra", "unmatched:/v1/files/{id}/…"),
        ("/", "unmatched:/"),
    ],
)
def test_unknown_paths_get_route_templates_as_labels(path, label):
    assert unmatched_label(path) == label


async def test_unknown_paths_labels_stay_bounded(gw):
    for i in range(80):
        await gw.http.get(f"/p{i}", headers=ADMIN)
    metrics = (await gw.http.get("/metrics")).text
    labels = {
        line.split('endpoint="', 1)[1].split('"', 1)[0]
        for line in metrics.splitlines()
        if line.startswith("forge_gateway_requests_total{") and "unmatched" in line
    }
    assert "unmatched:/p0" in labels and "unmatched:other" in labels
    assert len(labels) <= 65
