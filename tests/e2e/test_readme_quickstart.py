"""The README's Quick start, run as written (issue 29).

Every shell block of the README's ``## Quick start`` section, joined in order into one bash script
(``tests/readme_quickstart.py``), runs verbatim against the local control plane from the
repository's root, with the virtualenv's ``python`` and the cached ``kubectl`` first on PATH and
the control plane's kubeconfig as ``KUBECONFIG`` — as a user with an activated virtualenv and a
current kubeconfig runs it. The only additions are bash's own: ``set -euo pipefail`` (a failing
line fails the test) and an exit trap that stops a background job a failed run leaves behind.

Serial tier: the quick start's manager watches every namespace and works in ``default``, so it runs
on the serial tier's control plane, one test at a time; the objects it makes are deleted after.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..readme_quickstart import quickstart_script
from ..readme_quickstart import wrapped as wrap
from .conftest import ROOT, Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.serial]

README = ROOT / "README.md"
MADE = ("es/llama-decode", "es/llama-es", "es/llama-pd", "tidal/llama-office-hours", "rsg/llama-pd",
        "llms/chat-llama", "llmslo/chat-llama", "deployment/llama-decode", "deployment/llama",
        "deployment/llama-prefill", "deployment/llama-pd-decode", "deployment/llama-chat")


def test_the_readme_quick_start_runs_as_written(cluster: Cluster, tmp_path: Path) -> None:
    script = quickstart_script(README.read_text(encoding="utf-8"))
    assert "python -m escaler manager" in script and "kill %1" in script
    wrapped = tmp_path / "quickstart.sh"
    wrapped.write_text(wrap(script), encoding="utf-8")
    path = os.pathsep.join([str(Path(sys.executable).parent), str(Path(cluster.kubectl_bin).parent),
                            "/usr/local/bin", "/usr/bin", "/bin"])
    env = {"PATH": path, "KUBECONFIG": str(cluster.kubeconfig), "HOME": os.environ.get("HOME", "/root"),
           "LANG": "C.UTF-8"}
    log = tmp_path / "quickstart.log"
    try:
        with log.open("w", encoding="utf-8") as out:
            done = subprocess.run(["bash", str(wrapped)], cwd=ROOT, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, timeout=300, check=False)
        text = log.read_text(encoding="utf-8", errors="replace")
        if done.returncode != 0:
            state = cluster.kubectl("get", "es,tidal,rsg,llms,llmslo", "-n", "default", "-o", "yaml",
                                    check=False)
            raise AssertionError(f"the quick start failed ({done.returncode}):\n{text[-6000:]}\n"
                                 f"{state[-6000:]}")
        for made in ("elasticscaler.elasticscaler.io/llama-decode", "tidal.tidal.io/llama-office-hours",
                     "resourcescalinggroup.autoscaling.openfuyao.com/llama-pd",
                     "llmslorequirement.llm.escaler.io/chat-llama", "llmscaler.llm.escaler.io/chat-llama"):
            assert f"{made} created" in text, made
        assert "elasticscaler.elasticscaler.io/llama-decode condition met" in text
        assert "tidal.tidal.io/llama-office-hours condition met" in text
        # the two explain commands print a scaler's decision, and the clean-up deletes everything
        assert "ElasticScaler default/llama-decode" in text and "ElasticScaler default/llama-pd" in text
        assert "LLMScaler default/chat-llama" in text
        assert text.count(" deleted") >= len(MADE)
    finally:
        cluster.kubectl("delete", *MADE, "-n", "default", "--ignore-not-found", check=False)
