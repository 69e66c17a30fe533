"""escaler.kube.typed: generated APIs bound to an explicit client, and models as JSON dicts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes.client import CoreV1Api, V1Container, V1ObjectMeta, V1Pod, V1PodSpec
from test_kube_fakeapi import FakeAPI

from escaler.kube.typed import to_dict, typed


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    with FakeAPI() as a:
        yield a


def test_typed_api_uses_the_given_client(api: FakeAPI) -> None:
    api.put_object("/api/v1", "pods", {"apiVersion": "v1", "kind": "Pod",
                                       "metadata": {"name": "p1", "namespace": "ns1"}})
    core = typed(api.rest().api_client, CoreV1Api)
    pod = core.read_namespaced_pod("p1", "ns1")
    assert pod.metadata.name == "p1"
    assert api.reqs("GET", "/api/v1/namespaces/ns1/pods/p1")


def test_typed_refuses_a_missing_client() -> None:
    with pytest.raises(ValueError, match="api_client is required"):
        typed(None, CoreV1Api)  # type: ignore[arg-type]


def test_to_dict_is_the_wire_form() -> None:
    pod = V1Pod(api_version="v1", kind="Pod", metadata=V1ObjectMeta(name="p", namespace="n"),
                spec=V1PodSpec(containers=[V1Container(name="c", image="busybox")]))
    assert to_dict(pod) == {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"},
                            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    with pytest.raises(TypeError, match="JSON object"):
        to_dict([pod])
