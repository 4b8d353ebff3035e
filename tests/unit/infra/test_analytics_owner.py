"""The client side of the store owner's query endpoint: the key it finds and sends."""

from __future__ import annotations

import httpx
import pytest

from infra.analytics import AnalyticsUnavailableError, owner_key, owner_key_file, query_owner


def answering(status: int, body: dict, seen: list[httpx.Request]):
    def get(url, params, headers, timeout):
        seen.append(httpx.Request("GET", url, params=params, headers=headers))
        return httpx.Response(status, json=body)

    return get


def test_the_key_is_read_from_the_home_the_worker_uses(tmp_path):
    owner_key_file(tmp_path).parent.mkdir()
    owner_key_file(tmp_path).write_text("the-key\n")
    assert owner_key(tmp_path) == "the-key"


def test_a_missing_key_says_where_it_looked(tmp_path):
    with pytest.raises(AnalyticsUnavailableError, match=r"no query key at .*sql\.key"):
        owner_key(tmp_path)


def test_the_key_goes_as_a_bearer_header_not_in_the_url(monkeypatch):
    seen: list[httpx.Request] = []
    monkeypatch.setattr(httpx, "get", answering(200, {"columns": ["n"], "rows": [["1"]]}, seen))
    assert query_owner("http://127.0.0.1:1", "SELECT 1 AS n", key="k" * 32) == (["n"], [("1",)])
    assert seen[0].headers["Authorization"] == "Bearer " + "k" * 32
    assert "k" * 32 not in str(seen[0].url)


def test_a_refusal_carries_the_workers_reason(monkeypatch):
    monkeypatch.setattr(httpx, "get", answering(403, {"error": "wrong key"}, []))
    with pytest.raises(AnalyticsUnavailableError, match="wrong key"):
        query_owner("http://127.0.0.1:1", "SELECT 1", key="x")


def test_without_a_key_the_one_in_the_environments_home_is_sent(tmp_path, monkeypatch):
    owner_key_file(tmp_path).parent.mkdir()
    owner_key_file(tmp_path).write_text("published")
    monkeypatch.setenv("FORGE_HOME", str(tmp_path))
    seen: list[httpx.Request] = []
    monkeypatch.setattr(httpx, "get", answering(200, {"columns": [], "rows": []}, seen))
    query_owner("http://127.0.0.1:1", "SELECT 1")
    assert seen[0].headers["Authorization"] == "Bearer published"
