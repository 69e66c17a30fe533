"""The SLO API's form at ``/`` in a real headless browser (Debian's chromium + chromedriver, driven by
selenium), against a live SLO API on the real API server: list the routes, view one, edit a bound
(written to the cluster), and see the API's 400 message for an invalid bound. Beside them, read-only,
what the decision engine wrote in a route's status (issue 29): the objective, the measured values and
the decision — a status written here as the engine writes it, its reason holding markup that must
show as text — and "no status yet" for the route without one.

``make chromium`` (a prerequisite of ``make test`` / ``make e2e``) installs the browser; without it
this test FAILS saying so — it never skips.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from .conftest import Cluster
from .sloapi_helpers import apply_in, job_slo, llm_slo, spec_of, start_slo_api, wait_routes

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_SECONDS = 30


@contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    """Headless chromium; ``pytest.fail`` (inside the test, so it is a failure) when it is absent."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (os.path.isfile(p) and os.access(p, os.X_OK))]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not found: the SLO API form test needs Debian's chromium and "
                    "chromium-driver (run `make chromium`, or apt-get install -y chromium chromium-driver)")
    profile = tempfile.mkdtemp(prefix="escaler-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _wait_text(driver: webdriver.Chrome, element_id: str, text: str) -> str:
    def has() -> str | bool:
        value = driver.find_element(By.ID, element_id).text
        return value if text in value else False

    try:
        return str(WebDriverWait(driver, WAIT_SECONDS).until(lambda _: has()))
    except Exception as exc:
        raise AssertionError(f"#{element_id} never showed {text!r}; it shows "
                             f"{driver.find_element(By.ID, element_id).text!r}") from exc


def _wait_loads(driver: webdriver.Chrome, n: int) -> None:
    """Wait until the page has finished ``n`` listings (``#routes[data-loads]``)."""
    WebDriverWait(driver, WAIT_SECONDS).until(
        lambda d: int(d.find_element(By.ID, "routes").get_attribute("data-loads") or 0) >= n)


# a decision reason holding markup: the page must show it as text, never parse it
MARKUP_REASON = ('TTFT p90 (ms) 950 vs target 800 <b id="injected">misses</b> & <i>the SLO</i>: '
                 "scale up 3 -> 4")
DECIDED_AT = "2026-12-06T22:00:00Z"


def _write_engine_status(cluster: Cluster, ns: str) -> None:
    """chat-cr's status as the decision engine writes it (escaler.reconcilers.slo.report)."""
    status = {"observedGeneration": 1, "decision": {
        "replicas": 4, "reason": MARKUP_REASON, "time": DECIDED_AT,
        "signals": {"currentReplicas": 3, "ttftMs": 950, "ttftTargetMs": 800, "otps": 22, "otpsTarget": 20}},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Sized", "observedGeneration": 1,
                        "message": "every signal was read", "lastTransitionTime": DECIDED_AT}]}
    cluster.kubectl("patch", "llmslorequirements.llm.escaler.io", "chat-cr", "-n", ns, "--subresource=status",
                    "--type=merge", "-p", json.dumps({"status": status}))


def _cells(row: Any) -> dict[str, str]:
    return {c: row.find_element(By.CSS_SELECTOR, f"td.{c}").text
            for c in ("objective", "measured", "decision")}


def test_form_lists_views_edits_and_shows_400(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    ns = namespace
    apply_in(cluster, ns, llm_slo("chat-cr", "chat-llama"), job_slo("batch-cr", "batch-embed"))
    _write_engine_status(cluster, ns)
    with chromium() as browser:
        api = start_slo_api(cluster, tmp_path, namespace=ns)
        try:
            wait_routes(api, 2)
            browser.get(api.url + "/")
            # list routes (the page lists on load; the button lists again)
            _wait_loads(browser, 1)
            browser.find_element(By.ID, "refresh").click()
            _wait_loads(browser, 2)
            assert browser.find_element(By.ID, "message").text == "2 route(s)"
            rows = browser.find_elements(By.CSS_SELECTOR, "#routes tbody tr")
            assert [r.get_attribute("data-route") for r in rows] == ["batch-embed", "chat-llama"]
            assert [r.get_attribute("data-namespace") for r in rows] == [ns, ns]
            assert "replica 1 .. replica 8" in rows[1].text
            # what the engine observed, read-only: chat-llama's status; batch-embed has none yet
            assert _cells(rows[1]) == {"objective": "TTFT p90 <= 800 ms; OTPS >= 20 tokens/s",
                                       "measured": "TTFT p90 950 ms; OTPS 22 tokens/s",
                                       "decision": "4 replicas"}
            assert _cells(rows[0]) == {"objective": "queue depth <= 200", "measured": "no status yet",
                                       "decision": "no status yet"}
            # view one
            rows[1].find_element(By.CSS_SELECTOR, "button.view").click()
            detail = _wait_text(browser, "detail", '"route": "chat-llama"')
            assert '"promql"' in detail
            assert _observed(browser) == {
                "objective": "TTFT p90 <= 800 ms; OTPS >= 20 tokens/s",
                "measured": "TTFT p90 950 ms; OTPS 22 tokens/s", "decision": "4 replicas",
                "reason": MARKUP_REASON, "ready": "True Sized: every signal was read", "time": DECIDED_AT}
            # the reason's markup is text: no element was made of it
            assert browser.find_elements(By.ID, "injected") == []
            assert browser.find_elements(By.CSS_SELECTOR, "#observed-reason *") == []
            # edit a bound: max replica 12, written to the CR
            Select(browser.find_element(By.ID, "bound-end")).select_by_visible_text("max")
            Select(browser.find_element(By.ID, "bound-type")).select_by_visible_text("replica")
            value = browser.find_element(By.ID, "bound-value")
            value.clear()
            value.send_keys("12")
            browser.find_element(By.ID, "save-bound").click()
            _wait_text(browser, "message", "saved bounds.max of chat-llama")
            assert spec_of(cluster, ns, "llmslorequirements", "chat-cr")["bounds"]["max"] == {
                "type": "replica", "value": 12}
            _wait_text(browser, "routes", "replica 1 .. replica 12")
            # an invalid bound: the API's 400 message is shown, nothing written
            value.clear()
            value.send_keys("-3")
            browser.find_element(By.ID, "save-bound").click()
            message = _wait_text(browser, "message", "invalid_request")
            assert message == "invalid_request: bounds.max.value: must be an integer >= 0, got -3"
            assert browser.find_element(By.ID, "message").get_attribute("class") == "error"
            # a bound the cluster's CEL refuses (min above max): the API server's reason, as 400
            Select(browser.find_element(By.ID, "bound-end")).select_by_visible_text("min")
            value.clear()
            value.send_keys("20")
            browser.find_element(By.ID, "save-bound").click()
            message = _wait_text(browser, "message", "bounds.min.value")
            assert message.startswith("invalid_request: bounds.min.value: ") and "chat-cr" not in message
            assert spec_of(cluster, ns, "llmslorequirements", "chat-cr")["bounds"]["min"]["value"] == 1
            # the types offered follow the route (issue 28 item 11): an aggregated LLM route has no
            # pdengine bound; a job route's max is a replica count only
            assert _offered(browser) == ["replica", "concurrency"]
            rows = browser.find_elements(By.CSS_SELECTOR, "#routes tbody tr")
            rows[0].find_element(By.CSS_SELECTOR, "button.view").click()
            _wait_text(browser, "detail", '"route": "batch-embed"')
            assert _observed(browser) == {"objective": "queue depth <= 200", "measured": "no status yet",
                                          "decision": "no status yet", "reason": "", "ready": "", "time": ""}
            Select(browser.find_element(By.ID, "bound-end")).select_by_visible_text("max")
            assert _offered(browser) == ["replica"]
            Select(browser.find_element(By.ID, "bound-end")).select_by_visible_text("min")
            assert _offered(browser) == ["replica", "concurrency"]
        finally:
            api.stop()


def _observed(browser: webdriver.Chrome) -> dict[str, str]:
    """The read-only values beside the bound editor."""
    return {k: browser.find_element(By.ID, f"observed-{k}").text
            for k in ("objective", "measured", "decision", "reason", "ready", "time")}


def _offered(browser: webdriver.Chrome) -> list[str]:
    """The bound types the form lets a user pick now."""
    select = browser.find_element(By.ID, "bound-type")
    return [o.get_attribute("value") or "" for o in select.find_elements(By.TAG_NAME, "option")
            if o.is_enabled()]
