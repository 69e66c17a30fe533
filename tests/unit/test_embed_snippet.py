"""The toolkit page's snippet runs: its code, taken from docs/toolkit.md as written, is
executed — the reconciler and setup() on a manager built on the in-process fake API, and its
``__main__`` block with that manager in place of a connected one — and annotates a ConfigMap,
then writes nothing more on a second pass (level-based, write only what differs)."""

from __future__ import annotations

import ast
import re
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from fakeapi import make_obj, wait_until
from lease_fakes import InMemoryLeaseClient
from runtime_fakes import FakeCluster, FakeMapper

from escaler.kube.events import FakeRecorder
from escaler.runtime import Manager, ManagerOptions

TOOLKIT = Path(__file__).resolve().parents[2] / "docs" / "toolkit.md"


def snippet() -> str:
    text = TOOLKIT.read_text(encoding="utf-8")
    section = text[text.index("# The toolkit"):]
    section = section[:section.index("\n## ", 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "docs/toolkit.md's first section has no ```python block"
    return str(blocks[0])


class FakeClient:
    """The one ``mgr.client`` call the snippet makes: a merge patch of metadata, applied to the fake."""

    def __init__(self, cluster: FakeCluster) -> None:
        self._api = cluster.apis["configmaps"]
        self._mu = threading.Lock()
        self.patches: list[tuple[str, str, dict[str, Any]]] = []

    def patch(self, gvk: tuple[str, str], name: str, body: dict[str, Any], namespace: str | None = None,
              **_: Any) -> dict[str, Any]:
        assert gvk == ("v1", "ConfigMap")
        with self._mu:
            self.patches.append((namespace or "", name, body))
        obj = self._api.get(f"{namespace}/{name}")
        assert obj is not None
        meta = obj["metadata"]
        meta["annotations"] = {**(meta.get("annotations") or {}), **body["metadata"]["annotations"]}
        return self._api.update(obj)

    def count(self) -> int:
        with self._mu:
            return len(self.patches)


def test_the_toolkit_snippet_runs_on_the_fake_api() -> None:
    code = snippet()
    tree = ast.parse(code)
    main_block = [n for n in tree.body if isinstance(n, ast.If)]
    assert len(main_block) == 1, "the snippet ends with one `if __name__ == '__main__':` block"
    module: dict[str, Any] = {"__name__": "keycount_snippet"}
    exec(compile(code, "docs/toolkit.md", "exec"), module)  # defines KeyCount, setup; skips __main__

    cluster = FakeCluster()
    cms = cluster.apis["configmaps"]
    cms.create(make_obj("two", data={"a": "1", "b": "2"}))
    client = FakeClient(cluster)
    built: list[Manager] = []
    codes: list[int] = []

    class FakeBackedManager(Manager):
        """What ``Manager(ManagerOptions(...))`` builds in the snippet, on fakes; start() returns once
        the ConfigMap is annotated (a real one runs until SIGTERM)."""

        def __init__(self, options: ManagerOptions) -> None:
            assert options.leader_election and options.leader_election_id == "keycount"
            super().__init__(replace(options, metrics_bind_address="0", health_probe_bind_address="0"),
                             mapper=FakeMapper(), lw_factory=cluster.lw_factory, client=client,  # type: ignore[arg-type]
                             lease_client=InMemoryLeaseClient(), event_recorder=FakeRecorder())
            built.append(self)

        def start(self, stop: threading.Event | None = None) -> int:
            halt = threading.Event()
            t = threading.Thread(target=lambda: codes.append(super(FakeBackedManager, self).start(halt)),
                                 daemon=True, name="snippet-manager")
            t.start()
            try:
                wait_until(lambda: (cms.get("default/two") or {}).get("metadata", {}).get(
                    "annotations", {}).get(module["ANNOTATION"]) == "2", timeout=10, what="annotated")
                # the annotation's own watch event is reconciled too, and writes nothing
                cms.create(make_obj("one", data={"x": "1"}))
                wait_until(lambda: client.count() == 2, timeout=10, what="second ConfigMap annotated")
            finally:
                halt.set()
                t.join(15)
            assert not t.is_alive(), "manager did not stop"
            return codes[0]

    main_ns = {**module, "Manager": FakeBackedManager}
    main_body = ast.Module(body=main_block[0].body, type_ignores=[])
    try:
        exec(compile(main_body, "docs/toolkit.md#main", "exec"), main_ns)
    except SystemExit as done:
        assert done.code == 0
    else:
        raise AssertionError("the snippet's __main__ block should end in SystemExit(mgr.start())")

    assert len(built) == 1
    assert [(ns, name) for ns, name, _ in client.patches] == [("default", "two"), ("default", "one")]
    annotated = cms.get("default/one")
    assert annotated is not None and annotated["metadata"]["annotations"][module["ANNOTATION"]] == "1"
