"""escaler.kube.config and escaler.kube.rest against a local fake API server."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import Configuration
from test_kube_fakeapi import ABORT, FakeAPI, Reply, status

from escaler.errors import ConnectionFailure, StatusError, is_retryable
from escaler.kube.config import POOL_MARGIN, ConfigError, load_config, new_api_client, pool_size_for
from escaler.kube.rest import USER_AGENT, RestClient


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    with FakeAPI() as a:
        yield a


def _kubeconfig(path: Path, contexts: dict[str, tuple[str, str]], current: str) -> Path:
    """contexts: name -> (server, token)."""
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": n, "cluster": {"server": s}} for n, (s, _) in contexts.items()],
        "users": [{"name": n, "user": {"token": t}} for n, (_, t) in contexts.items()],
        "contexts": [{"name": n, "context": {"cluster": n, "user": n}} for n in contexts],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


# -- config -------------------------------------------------------------------------------------


def test_explicit_kubeconfig_is_used_and_global_default_untouched(api: FakeAPI, tmp_path: Path) -> None:
    before = Configuration.get_default_copy()
    path = _kubeconfig(tmp_path / "kc", {"fake": (api.url, "tok-1")}, "fake")

    cfg = load_config(str(path), environ={})

    assert cfg.host == api.url
    assert cfg is not Configuration.get_default()
    after = Configuration.get_default_copy()
    assert (after.host, after.api_key) == (before.host, before.api_key)
    # the token reaches the server, and so does our User-Agent
    client = new_api_client(cfg, pool_size=3)
    try:
        RestClient(client).request("GET", "/api/v1")
    finally:
        client.close()
    (req,) = api.reqs("GET", "/api/v1")
    assert req.headers["authorization"] == "Bearer tok-1"
    assert req.headers["user-agent"] == USER_AGENT


def test_each_call_returns_a_new_configuration(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "kc", {"a": ("http://127.0.0.1:1", "t")}, "a")
    assert load_config(str(path), environ={}) is not load_config(str(path), environ={})


def test_context_selects_cluster(tmp_path: Path) -> None:
    contexts = {"a": ("http://127.0.0.1:1", "ta"), "b": ("http://127.0.0.1:2", "tb")}
    path = _kubeconfig(tmp_path / "kc", contexts, "a")
    assert load_config(str(path), "b", environ={}).host == "http://127.0.0.1:2"
    assert load_config(str(path), environ={}).host == "http://127.0.0.1:1"


def test_kubeconfig_env_is_second(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "kc", {"a": ("http://127.0.0.1:7", "t")}, "a")
    home = _kubeconfig(tmp_path / "home", {"h": ("http://127.0.0.1:9", "t")}, "h")
    cfg = load_config(environ={"KUBECONFIG": f"{tmp_path / 'missing'}:{path}"}, default_kubeconfig=str(home))
    assert cfg.host == "http://127.0.0.1:7"


def test_in_cluster_before_home_kubeconfig(tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token")
    (sa / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    home = _kubeconfig(tmp_path / "home", {"h": ("http://127.0.0.1:9", "t")}, "h")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}

    cfg = load_config(environ=env, service_account_dir=str(sa), default_kubeconfig=str(home))

    assert cfg.host == "https://10.0.0.1:443"
    assert cfg.ssl_ca_cert == str(sa / "ca.crt")
    assert cfg.get_api_key_with_prefix("BearerToken") == "bearer sa-token"


def test_home_kubeconfig_is_last(tmp_path: Path) -> None:
    home = _kubeconfig(tmp_path / "home", {"h": ("http://127.0.0.1:9", "t")}, "h")
    assert load_config(environ={}, default_kubeconfig=str(home)).host == "http://127.0.0.1:9"


def test_nothing_found_names_every_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as ei:
        load_config(environ={}, service_account_dir=str(tmp_path), default_kubeconfig=str(tmp_path / "none"))
    msg = str(ei.value)
    for needle in ("explicit kubeconfig: not given", "$KUBECONFIG: not set",
                   "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT not set", str(tmp_path / "none")):
        assert needle in msg
    assert len(ei.value.attempts) == 4


@pytest.mark.parametrize(
    ("setup", "needle"),
    [
        ("missing-explicit", "does not exist"),
        ("broken-explicit", "explicit kubeconfig"),
        ("unknown-context", "explicit kubeconfig"),
        ("in-cluster-no-token", "in-cluster"),
    ],
    ids=lambda v: str(v),
)
def test_present_but_broken_source_is_an_error(tmp_path: Path, setup: str, needle: str) -> None:
    kwargs: dict[str, Any] = {"environ": {}, "default_kubeconfig": str(tmp_path / "none")}
    if setup == "missing-explicit":
        kwargs["kubeconfig"] = str(tmp_path / "nope")
    elif setup == "broken-explicit":
        (tmp_path / "kc").write_text("clusters: [oops")
        kwargs["kubeconfig"] = str(tmp_path / "kc")
    elif setup == "unknown-context":
        kwargs["kubeconfig"] = str(_kubeconfig(tmp_path / "kc", {"a": ("http://x", "t")}, "a"))
        kwargs["context"] = "zzz"
    else:
        kwargs["environ"] = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
        kwargs["service_account_dir"] = str(tmp_path)
    with pytest.raises(ConfigError, match=needle):
        load_config(**kwargs)


def test_context_skips_in_cluster(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ConfigError, match="in-cluster: skipped"):
        load_config(context="c", environ=env, default_kubeconfig=str(tmp_path / "none"))


def test_pool_size() -> None:
    assert pool_size_for(3, 10) == 13 + POOL_MARGIN
    with pytest.raises(ValueError, match="informers"):
        pool_size_for(-1, 1)
    cfg = Configuration(host="http://127.0.0.1:1")
    client = new_api_client(cfg, pool_size=17)
    try:
        assert cfg.connection_pool_maxsize == 17
        assert client.rest_client.pool_manager.connection_pool_kw["maxsize"] == 17
    finally:
        client.close()
    with pytest.raises(ValueError, match="pool_size"):
        new_api_client(Configuration(), pool_size=0)


# -- rest: error mapping --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "body", "headers", "reason", "message", "retry_after"),
    [
        (404, status(404, "NotFound", 'pods "x" not found'), {}, "NotFound", 'pods "x" not found', None),
        (409, status(409, "Conflict", "the object has been modified"), {}, "Conflict",
         "the object has been modified", None),
        (410, status(410, "Expired", "too old resource version: 1 (5)"), {}, "Expired",
         "too old resource version: 1 (5)", None),
        (429, status(429, "TooManyRequests", "slow down"), {"Retry-After": "3"}, "TooManyRequests",
         "slow down", 3.0),
        (500, status(500, "InternalError", "etcd is sad"), {}, "InternalError", "etcd is sad", None),
        (503, "service unavailable", {"Content-Type": "text/plain"}, "", "service unavailable", None),
    ],
    ids=["404", "409", "410", "429-retry-after", "500", "503-text"],
)
def test_status_bodies_become_status_errors(
    api: FakeAPI, code: int, body: Any, headers: dict[str, str], reason: str, message: str,
    retry_after: float | None,
) -> None:
    api.on("GET", "/x", lambda r: Reply(code, body, headers))
    with pytest.raises(StatusError) as ei:
        api.rest().request("GET", "/x")
    err = ei.value
    got = (err.code, err.reason, err.message, err.retry_after_seconds)
    assert got == (code, reason, message, retry_after)
    assert is_retryable(err) == (code == 429 or code >= 500)


def test_non_json_error_body_is_capped(api: FakeAPI) -> None:
    html = "<html>" + "x" * 5000 + "</html>"
    api.on("GET", "/x", lambda r: Reply(502, html, {"Content-Type": "text/html"}))
    with pytest.raises(StatusError) as ei:
        api.rest().request("GET", "/x")
    assert ei.value.code == 502
    assert len(ei.value.message.encode()) <= 1024 + len("…".encode())
    assert ei.value.message.startswith("<html>xxx")


def test_connection_refused_is_connection_failure() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = new_api_client(Configuration(host=f"http://127.0.0.1:{port}"), pool_size=1)
    try:
        with pytest.raises(ConnectionFailure, match="GET /api/v1"):
            RestClient(client).request("GET", "/api/v1")
    finally:
        client.close()


def test_request_timeout_is_connection_failure(api: FakeAPI) -> None:
    def stall(r: Any) -> Reply:
        api.release.wait(10)
        return Reply(200, {})

    api.on("GET", "/slow", stall)
    with pytest.raises(ConnectionFailure):
        api.rest().request("GET", "/slow", timeout=(2.0, 0.2))
    assert len(api.reqs("GET", "/slow")) == 1  # urllib3 did not retry the read


@pytest.mark.parametrize(
    ("method", "outcome", "attempts"),
    [("GET", "ok", 2), ("POST", "failure", 1)],
    ids=["get-retried-once", "post-not-retried"],
)
def test_dropped_connection_retry_policy(api: FakeAPI, method: str, outcome: str, attempts: int) -> None:
    calls: list[int] = []

    def flaky(r: Any) -> Reply:
        calls.append(1)
        return Reply(ABORT) if len(calls) == 1 else Reply(200, {"ok": True})

    api.on(method, "/flaky", flaky)
    rest = api.rest()
    if outcome == "ok":
        assert rest.request(method, "/flaky") == {"ok": True}
    else:
        with pytest.raises(ConnectionFailure):
            rest.request(method, "/flaky", body={})
    assert len(calls) == attempts


@pytest.mark.parametrize(
    ("reply", "expected"),
    [(Reply(200, {"a": 1}), {"a": 1}), (Reply(200, b""), {}), (Reply(201, {"kind": "X"}), {"kind": "X"})],
    ids=["json", "empty", "created"],
)
def test_success_bodies(api: FakeAPI, reply: Reply, expected: dict[str, Any]) -> None:
    api.on("POST", "/x", lambda r: reply)
    assert api.rest().request("POST", "/x", body={"in": True}) == expected
    (req,) = api.reqs("POST", "/x")
    assert req.body == {"in": True}
    assert req.headers["content-type"] == "application/json"


def test_non_json_success_is_an_error(api: FakeAPI) -> None:
    api.on("GET", "/x", lambda r: Reply(200, "<html>proxy login</html>"))
    with pytest.raises(StatusError, match="not a JSON object"):
        api.rest().request("GET", "/x")


def test_query_encoding_and_headers(api: FakeAPI) -> None:
    api.on("GET", "/q", lambda r: Reply(200, {}))
    rest = api.rest(user_agent="me/1")
    rest.request("GET", "/q", query=[("labelSelector", "app=a,tier in (x,y)"), ("limit", "5")])
    (req,) = api.reqs("GET", "/q")
    assert req.query == [("labelSelector", "app=a,tier in (x,y)"), ("limit", "5")]
    assert req.headers["user-agent"] == "me/1"
    assert req.headers["accept"] == "application/json"


@pytest.mark.parametrize(
    "kwargs",
    [{"user_agent": ""}, {"default_timeout": 0}, {"default_timeout": (1.0, -1.0)}],
    ids=["empty-user-agent", "zero-timeout", "negative-read-timeout"],
)
def test_rest_client_validates(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RestClient(object(), **kwargs)  # type: ignore[arg-type]


def test_stream_lines_splits_and_ends(api: FakeAPI) -> None:
    from test_kube_fakeapi import Stream

    api.on("GET", "/s", lambda r: Stream([b'{"a":1}\n{"b"', b':2}\n\n', b'{"c":3}']))
    lines, close = api.rest().stream_lines("/s", None, read_timeout=5)
    assert list(lines) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
    close()  # after the end: harmless
