"""The deployment packaging: the kustomize base, its overlays and webhook component, and the Helm chart.

Renders with the real tools (``kubectl kustomize`` and ``helm`` from ``~/.cache/escaler``, built by
``hack/build.sh``; a missing binary fails the test and names the command that builds it) and
checks what a platform engineer relies on:

* ``helm lint`` passes; ``helm template`` renders with the default values and with the webhook and
  the ServiceMonitor on; ``values.schema.json`` refuses a bad value and the error names the field;
* the chart and the base render the same objects, the same RBAC rules (the chart's rules are a copy
  of ``manifests/rbac/``) and the same effective flags (parsed by escaler's own argument parser, so
  every flag a manifest passes exists and a flag given twice takes its last value, as the overlays
  rely on);
* no Role or ClusterRole anywhere has a wildcard verb, resource or API group, and none grants
  Secrets cluster-wide;
* every Deployment runs non-root with a read-only root filesystem, no privilege escalation, all
  capabilities dropped, the RuntimeDefault seccomp profile, requests and limits, and liveness and
  readiness probes on the ports its process serves; NetworkPolicies admit exactly those ports;
* the chart's CRDs are byte-identical to ``manifests/crds/`` (``make crds`` refreshes both);
* nothing shipped (manifests, chart, packaged data, Dockerfile) passes or names the test-only
  ``--unsafe-test-clock-file``, and every rendered process runs on the real clock.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

import escaler
from escaler.cli.flags import duration_seconds
from escaler.cli.main import build_parser
from escaler.cli.manager import TEST_CLOCK_FLAG
from escaler.runtime.manager import DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT
from escaler.runtime.server import parse_bind_address

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
CHART = ROOT / "charts" / "escaler"
RELEASE = "escaler"
NAMESPACE = "escaler-system"
IMAGE = f"ghcr.io/escaler/escaler:{escaler.__version__}"
# the SLO API's own image (the Dockerfile's slo-api target, escaler[sloapi]: issue 29)
SLO_API_IMAGE = f"ghcr.io/escaler/escaler-slo-api:{escaler.__version__}"
ROLE_KINDS = ("ClusterRole", "Role")
BINDING_KINDS = ("ClusterRoleBinding", "RoleBinding")

Obj = dict[str, Any]


# --- the tools ----------------------------------------------------------------------------------


def _versions() -> dict[str, str]:
    out = {}
    for line in (ROOT / "hack" / "versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def cached_binary(component: str, name: str) -> str:
    """The path ``hack/build.sh --print`` prints for ``name`` (same cache layout, nothing built)."""
    cache_dir = Path(os.environ.get("ESCALER_CACHE") or Path.home() / ".cache" / "escaler")
    version = _versions()["K8S_VERSION" if component == "k8s" else f"{component.upper()}_VERSION"]
    path = cache_dir / f"{component}-{version}" / "bin" / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{name} is not built ({path} missing): run `hack/build.sh {component}`")
    return str(path)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT)


# libyaml's safe loader (the same safe YAML, parsed in C): the renders are ~270 documents a run,
# and the pure-Python parser spent seconds of CPU on them
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _docs(text: str) -> list[Obj]:
    return [d for d in yaml.load_all(text, Loader=_SAFE_LOADER) if d]


@cache
def kustomize(path: str) -> tuple[Obj, ...]:
    r = _run(cached_binary("k8s", "kubectl"), "kustomize", str(MANIFESTS / path))
    assert r.returncode == 0, f"kubectl kustomize manifests/{path} failed:\n{r.stderr}"
    return tuple(_docs(r.stdout))


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return _run(cached_binary("helm", "helm"), *args)


@cache
def chart(*sets: str) -> tuple[Obj, ...]:
    """``helm template`` of the chart as release ``escaler`` in ``escaler-system``, CRDs included."""
    flags = [a for s in sets for a in ("--set", s)]
    r = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--include-crds", *flags)
    assert r.returncode == 0, f"helm template {' '.join(flags)} failed:\n{r.stderr}"
    return tuple(_docs(r.stdout))


WEBHOOK_ON = ("webhook.enabled=true", "serviceMonitor.enabled=true")
PRODUCTION_LIKE = ("webhook.enabled=true", "manager.podDisruptionBudget.enabled=true",
                   "manager.replicas=2")

RENDERS = {
    "base": lambda: kustomize("base"),
    "overlay dev": lambda: kustomize("overlays/dev"),
    "overlay production": lambda: kustomize("overlays/production"),
    "chart defaults": lambda: chart(),
    "chart webhook+serviceMonitor": lambda: chart(*WEBHOOK_ON),
    "chart metrics RBAC": lambda: chart("rbac.customMetrics={vllm_num_requests_waiting}",
                                        "rbac.externalMetrics={queue_depth}"),
    "chart without SLO API": lambda: chart("sloApi.enabled=false"),
}


def by_kind(objs: tuple[Obj, ...], kind: str) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def one(objs: tuple[Obj, ...], kind: str, name: str) -> Obj:
    found = by_kind(objs, kind)
    assert name in found, f"no {kind} {name}; have {sorted(found)}"
    return found[name]


def containers(objs: tuple[Obj, ...]) -> Iterator[tuple[str, Obj, Obj]]:
    for name, dep in by_kind(objs, "Deployment").items():
        for c in dep["spec"]["template"]["spec"]["containers"]:
            yield name, dep, c


def flags_of(container: Obj) -> argparse.Namespace:
    """The container's args as ``escaler`` parses them (the image's ENTRYPOINT is ``escaler``)."""
    parser, _ = build_parser()
    try:
        return parser.parse_args(container["args"])
    except SystemExit:
        raise AssertionError(f"escaler refuses the args {container['args']}") from None


# --- helm lint, helm template, the schema -------------------------------------------------------


def test_helm_lint_passes() -> None:
    r = helm("lint", str(CHART), "--strict")
    assert r.returncode == 0 and "0 chart(s) failed" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("sets", [(), WEBHOOK_ON, ("sloApi.enabled=false",)],
                         ids=["defaults", "webhook-and-servicemonitor", "no-slo-api"])
def test_helm_lint_passes_with_values(sets: tuple[str, ...]) -> None:
    flags = [a for s in sets for a in ("--set", s)]
    r = helm("lint", str(CHART), "--strict", *flags)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_charts_controllers_value_becomes_the_managers_flag() -> None:
    from escaler.cli.controllers import CONTROLLERS, enabled_controllers
    for sets, want in (((), frozenset(CONTROLLERS)),
                       (("manager.controllers=*\\,-rsg",), frozenset(CONTROLLERS) - {"rsg"})):
        manager = next(c for name, _dep, c in containers(chart(*sets)) if name.endswith("manager"))
        assert enabled_controllers(flags_of(manager).controllers) == want, manager["args"]


def test_the_webhook_and_the_servicemonitor_are_off_by_default() -> None:
    objs = chart()
    kinds = {o["kind"] for o in objs}
    assert "ValidatingWebhookConfiguration" not in kinds and "ServiceMonitor" not in kinds
    dep = one(objs, "Deployment", "escaler-manager")
    assert flags_of(dep["spec"]["template"]["spec"]["containers"][0]).webhook_port == 0


def test_webhook_and_servicemonitor_render_when_enabled() -> None:
    objs = chart(*WEBHOOK_ON)
    monitor = one(objs, "ServiceMonitor", "escaler-manager")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    # it selects the metrics Service, by labels that Service has, on a port that Service names
    metrics = one(objs, "Service", "escaler-manager-metrics")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= metrics["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in metrics["spec"]["ports"]]
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    config = one(objs, "ValidatingWebhookConfiguration", "escaler-validating-webhook")
    service = one(objs, "Service", "escaler-webhook")
    for hook in config["webhooks"]:
        ref = hook["clientConfig"]["service"]
        assert (ref["name"], ref["namespace"], ref["port"]) == ("escaler-webhook", NAMESPACE, 443)
    assert [p["port"] for p in service["spec"]["ports"]] == [443]
    dep = one(objs, "Deployment", "escaler-manager")
    args = flags_of(dep["spec"]["template"]["spec"]["containers"][0])
    assert args.webhook_port == 9443
    # served with the serving certificate, its caBundle kept by the manager
    assert (args.webhook_cert_dir, args.webhook_configuration) == ("", "escaler-validating-webhook")


def _webhooks(config: Obj) -> list[Obj]:
    """The webhooks without what an install fills in (the CA bundle)."""
    out = []
    for hook in config["webhooks"]:
        h = yaml.safe_load(yaml.safe_dump(hook))
        h["clientConfig"].pop("caBundle", None)
        out.append(h)
    return out


def test_the_charts_webhook_configuration_is_the_generated_one() -> None:
    generated = yaml.safe_load((MANIFESTS / "webhook" / "validating-webhook-configuration.yaml").read_text())
    rendered = one(chart(*WEBHOOK_ON), "ValidatingWebhookConfiguration", "escaler-validating-webhook")
    assert _webhooks(rendered) == _webhooks(generated)
    cert_manager = chart(*WEBHOOK_ON, "webhook.certManagerCertificate=escaler-system/escaler-webhook")
    injected = one(cert_manager, "ValidatingWebhookConfiguration", "escaler-validating-webhook")
    annotations = injected["metadata"]["annotations"]
    assert annotations == {"cert-manager.io/inject-ca-from": "escaler-system/escaler-webhook"}
    assert all("caBundle" not in h["clientConfig"] for h in injected["webhooks"])


@pytest.mark.parametrize(("value", "field"), [
    ("manager.replicas=-1", "/manager/replicas"),
    ("sloApi.replicas=-2", "/sloApi/replicas"),
    ("logFormat=xml", "/logFormat"),
    ("logLevel=trace", "/logLevel"),
    ("pollInterval=30x", "/pollInterval"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("sloApi.image.repository=", "/sloApi/image/repository"),
    ("sloApi.auth=basic", "/sloApi/auth"),
    ("webhook.failurePolicy=Maybe", "/webhook/failurePolicy"),
    ("rbac.externalMetrics={*}", "/rbac/externalMetrics/0"),
    ("rbac.customMetrics={pods/x}", "/rbac/customMetrics/0"),
    ("networkPolicy.endpointPorts={70000}", "/networkPolicy/endpointPorts/0"),
    ("manager.replica=3", "/manager"),
], ids=lambda v: str(v))
def test_a_bad_value_is_refused_naming_the_field(value: str, field: str) -> None:
    r = helm("template", RELEASE, str(CHART), "--set", value)
    assert r.returncode != 0, f"helm accepted {value}"
    assert "values don't meet the specifications of the schema" in r.stderr, r.stderr
    assert f"at '{field}'" in r.stderr, r.stderr


def test_the_slo_api_runs_its_own_image_and_the_manager_the_managers() -> None:
    """``sloApi.image`` names the SLO API's image (the manager's has no FastAPI); ``image`` the
    manager's; the pull policy is both Deployments'."""
    objs = chart("image.repository=reg.example/escaler", "image.tag=t1", "image.pullPolicy=Always",
                 "sloApi.image.repository=reg.example/escaler-slo-api", "sloApi.image.tag=t2")
    images = {c["name"]: (c["image"], c["imagePullPolicy"]) for _, _, c in containers(objs)}
    assert images == {"manager": ("reg.example/escaler:t1", "Always"),
                      "slo-api": ("reg.example/escaler-slo-api:t2", "Always")}


@pytest.mark.parametrize("text", ["30s", "2m", "1h30m", "500ms", "0", "30", "0.5", "1.5h", "10us", "µs",
                                  "30x", "-1s", "s", "", "1h 30m", "1e3s", "30S", ".5s", "1.s"])
def test_the_schemas_poll_interval_rule_is_the_managers(text: str) -> None:
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    pattern = schema["properties"]["pollInterval"]["pattern"]
    try:
        duration_seconds(text)
        accepted = True
    except argparse.ArgumentTypeError:
        accepted = False
    assert bool(re.search(pattern, text)) == accepted, (text, accepted)


def test_the_charts_version_is_escalers() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["version"] == meta["appVersion"] == escaler.__version__


# --- CRDs ---------------------------------------------------------------------------------------


def test_the_charts_crds_are_byte_identical_to_manifests() -> None:
    want = {p.name: p.read_bytes() for p in sorted((MANIFESTS / "crds").glob("*.yaml"))}
    have = {p.name: p.read_bytes() for p in sorted((CHART / "crds").iterdir())}
    drift = sorted(set(have) ^ set(want)) + sorted(n for n in want if n in have and have[n] != want[n])
    assert want and not drift, (
        f"charts/escaler/crds differs from manifests/crds ({', '.join(drift)}): run make crds")


def test_the_crds_kustomization_lists_every_crd() -> None:
    listed = yaml.safe_load((MANIFESTS / "crds" / "kustomization.yml").read_text())["resources"]
    files = sorted(p.name for p in (MANIFESTS / "crds").glob("*.yaml"))
    assert sorted(listed) == files, (
        f"manifests/crds/kustomization.yml lists {sorted(listed)}, the directory has {files}: "
        "add or remove the entries")
    crds = by_kind(kustomize("base"), "CustomResourceDefinition")
    assert len(crds) == len(files)


# --- the chart renders what the base renders ----------------------------------------------------


def _identity(objs: tuple[Obj, ...]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objs if o["kind"] != "Namespace"}


def test_the_chart_renders_the_objects_of_the_base() -> None:
    assert _identity(chart()) == _identity(kustomize("base"))


def test_the_chart_with_the_webhook_and_a_pdb_renders_the_objects_of_the_production_overlay() -> None:
    assert _identity(chart(*PRODUCTION_LIKE)) == _identity(kustomize("overlays/production"))


def _flags(objs: tuple[Obj, ...]) -> dict[str, dict[str, Any]]:
    return {name: vars(flags_of(c)) for name, _, c in containers(objs)}


def test_the_chart_runs_the_processes_of_the_base_with_the_same_flags() -> None:
    assert _flags(chart()) == _flags(kustomize("base"))


def test_the_chart_with_the_webhook_runs_the_manager_as_the_production_overlay_does() -> None:
    assert _flags(chart(*PRODUCTION_LIKE)) == _flags(kustomize("overlays/production"))


def _rules(objs: tuple[Obj, ...]) -> dict[tuple[str, str], list[Obj]]:
    return {(o["kind"], o["metadata"]["name"]): o.get("rules") or [] for o in objs if o["kind"] in ROLE_KINDS}


def _bindings(objs: tuple[Obj, ...]) -> dict[tuple[str, str], Obj]:
    return {(o["kind"], o["metadata"]["name"]): {"roleRef": o["roleRef"], "subjects": o["subjects"],
                                                 "namespace": o["metadata"].get("namespace")}
            for o in objs if o["kind"] in BINDING_KINDS}


def test_the_chart_and_the_base_grant_the_same_rbac() -> None:
    chart_rules, base_rules = _rules(chart()), _rules(kustomize("base"))
    assert chart_rules.keys() == base_rules.keys()
    for key, rules in base_rules.items():
        assert chart_rules[key] == rules, f"{key[0]} {key[1]}: the chart's rules differ from manifests/rbac"
    assert _bindings(chart()) == _bindings(kustomize("base"))


@pytest.mark.parametrize("where", list(RENDERS))
def test_every_shipped_server_speaks_tls_and_metrics_need_a_token(where: str) -> None:
    """Issue 27 item 8: the signal and decision API serves HTTPS (no --api-insecure: a certificate
    Secret or a self-signed one), /metrics is secure (HTTPS and a token allowed get on /metrics),
    and whoever may scrape it is named by a shipped ClusterRole."""
    objs = RENDERS[where]()
    [manager] = [c for name, _, c in containers(objs) if flags_of(c).command == "manager"]
    flags = flags_of(manager)
    assert not flags.api_insecure and flags.metrics_secure, manager["args"]
    [reader] = [o for o in objs
                if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-metrics-reader")]
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    # the SLO API: HTTPS (a Secret's pair, else self-signed), and the kubelet probes it so
    for _, _, c in containers(objs):
        if flags_of(c).command == "slo-api":
            assert flags_of(c).self_signed_tls or flags_of(c).cert_dir, c["args"]
            for probe in ("livenessProbe", "readinessProbe"):
                assert c[probe]["httpGet"]["scheme"] == "HTTPS", (where, probe)


SERVING_SECRET = "escaler-serving-cert"


@pytest.mark.parametrize("where", list(RENDERS))
def test_every_shipped_server_serves_a_certificate_clients_verify(where: str) -> None:
    """Issue 27 item 8, closed: the manager gets or creates one CA-signed serving certificate in the
    Secret escaler-serving-cert of its namespace, whose names cover every Service that serves HTTPS;
    the API, secure /metrics and the webhook serve it (no self-signed certificate, no cert dir to
    mount), the SLO API mounts its pair (never the CA key), the webhook configuration's caBundle is
    the manager's to set, and the RBAC grants exactly that Secret and that configuration."""
    objs = RENDERS[where]()
    [manager] = [c for _, _, c in containers(objs) if flags_of(c).command == "manager"]
    flags = flags_of(manager)
    assert getattr(flags, "serving_cert_secret", "") == f"{NAMESPACE}/{SERVING_SECRET}", manager["args"]
    assert not (flags.api_cert_dir or flags.metrics_cert_dir or flags.webhook_cert_dir), manager["args"]
    names = set(flags.serving_cert_dns_names.split(","))
    services = by_kind(objs, "Service")
    assert {f"{svc}.{NAMESPACE}.svc" for svc in services} <= names, (sorted(services), sorted(names))
    configs = by_kind(objs, "ValidatingWebhookConfiguration")
    if configs:
        assert flags.webhook_port == 9443 and flags.webhook_configuration in configs
        assert all("caBundle" not in h["clientConfig"] for c in configs.values() for h in c["webhooks"])
    for name, dep, c in containers(objs):
        if flags_of(c).command != "slo-api":
            continue
        slo = flags_of(c)
        assert slo.cert_dir and not slo.self_signed_tls, c["args"]
        _assert_mounted_secret(dep, slo.cert_dir, SERVING_SECRET)
        [volume] = [v for v in dep["spec"]["template"]["spec"]["volumes"]
                    if v.get("secret", {}).get("secretName") == SERVING_SECRET]
        assert {i["key"] for i in volume["secret"]["items"]} == {"tls.crt", "tls.key"}, name
    role = one(objs, "Role", SERVING_SECRET)
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [SERVING_SECRET],
         "verbs": ["get", "update"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["escaler-ca"],
         "verbs": ["get", "update"]}]
    # the CA published for clients that may not read the Secret (it holds the CA key)
    assert flags.serving_cert_ca_configmap == "escaler-ca"
    binding = one(objs, "RoleBinding", SERVING_SECRET)
    assert binding["roleRef"]["name"] == SERVING_SECRET
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "escaler-manager", "namespace": NAMESPACE}]
    assert {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"],
            "resourceNames": ["escaler-validating-webhook"], "verbs": ["get", "patch"]} in one(
        objs, "ClusterRole", "escaler-manager")["rules"]


def test_a_certificate_secret_of_its_own_wins_over_the_serving_certificate() -> None:
    objs = chart("webhook.enabled=true", "webhook.certSecretName=own-webhook", "webhook.caBundle=Cg==",
                 "manager.api.certSecretName=own-api", "manager.metrics.certSecretName=own-metrics",
                 "sloApi.certSecretName=own-slo")
    dep = one(objs, "Deployment", "escaler-manager")
    args = flags_of(dep["spec"]["template"]["spec"]["containers"][0])
    _assert_mounted_secret(dep, args.api_cert_dir, "own-api")
    _assert_mounted_secret(dep, args.metrics_cert_dir, "own-metrics")
    _assert_mounted_secret(dep, args.webhook_cert_dir, "own-webhook")
    assert args.webhook_configuration == ""  # its caBundle is the value's
    config = one(objs, "ValidatingWebhookConfiguration", "escaler-validating-webhook")
    assert {h["clientConfig"]["caBundle"] for h in config["webhooks"]} == {"Cg=="}
    slo = one(objs, "Deployment", "escaler-slo-api")
    slo_args = flags_of(slo["spec"]["template"]["spec"]["containers"][0])
    _assert_mounted_secret(slo, slo_args.cert_dir, "own-slo")


def test_without_the_serving_certificate_the_servers_fall_back_to_self_signed_ones() -> None:
    objs = chart("servingCert.enabled=false")
    for _, _, c in containers(objs):
        args = flags_of(c)
        if args.command == "manager":
            assert args.serving_cert_secret == ""
        else:
            assert args.self_signed_tls
    assert SERVING_SECRET not in by_kind(objs, "Role")
    flags = [a for s in ("webhook.enabled=true", "servingCert.enabled=false") for a in ("--set", s)]
    r = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *flags)
    assert r.returncode != 0
    assert "webhook.enabled: needs webhook.certSecretName, or servingCert.enabled" in r.stderr


def test_the_servicemonitor_scrapes_secure_metrics_with_prometheus_token() -> None:
    objs = chart("serviceMonitor.enabled=true", "serviceMonitor.prometheusServiceAccount.name=prometheus")
    [endpoint] = one(objs, "ServiceMonitor", "escaler-manager")["spec"]["endpoints"]
    assert (endpoint["scheme"], endpoint["tlsConfig"]) == ("https", {
        "ca": {"configMap": {"name": "escaler-ca", "key": "ca.crt"}},
        "serverName": "escaler-manager-metrics.escaler-system.svc"})
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    binding = one(objs, "ClusterRoleBinding", "escaler-metrics-reader")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]


@pytest.mark.parametrize(("chart_sets", "overlay"), [((), "base"), (PRODUCTION_LIKE, "overlays/production")])
def test_the_chart_and_the_base_admit_the_same_callers(chart_sets: tuple[str, ...], overlay: str) -> None:
    def ingress(objs: tuple[Obj, ...]) -> dict[str, Any]:
        return {o["metadata"]["labels"]["app.kubernetes.io/component"]: o["spec"]["ingress"]
                for o in objs if o["kind"] == "NetworkPolicy"}

    assert ingress(chart(*chart_sets)) == ingress(kustomize(overlay))
    base = ingress(kustomize(overlay))
    metrics = next(r for r in base["manager"] if r["ports"] == [{"port": 8080, "protocol": "TCP"}])
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}}]


@pytest.mark.parametrize("where", ["base", "chart defaults", "overlay production"])
def test_the_managers_admission_policy_is_shipped_and_binds_it(where: str) -> None:
    """manifests/rbac/manager-policy.yaml (issue 27 item 9): the chart renders the same policy, and
    each render matches its own manager's ServiceAccount name, in whatever namespace."""
    objs = RENDERS[where]()
    base = one(kustomize("base"), "ValidatingAdmissionPolicy", "escaler-manager-limits")
    policy = one(objs, "ValidatingAdmissionPolicy", "escaler-manager-limits")
    assert policy["spec"] == base["spec"], "the chart's ValidatingAdmissionPolicy differs from manifests/rbac"
    binding = one(objs, "ValidatingAdmissionPolicyBinding", "escaler-manager-limits")
    assert binding["spec"] == {"policyName": "escaler-manager-limits", "validationActions": ["Deny"]}
    [sa] = [o for o in objs if o["kind"] == "ServiceAccount" and o["metadata"]["name"].endswith("-manager")]
    [match] = policy["spec"]["matchConditions"]
    assert f"endsWith(':{sa['metadata']['name']}')" in match["expression"], match
    assert policy["spec"]["failurePolicy"] == "Fail"


def test_the_charts_metric_names_become_rules_without_wildcards() -> None:
    role = one(RENDERS["chart metrics RBAC"](), "ClusterRole", "escaler-manager-metrics")
    assert role["rules"] == [
        {"apiGroups": ["custom.metrics.k8s.io"], "resources": ["pods/vllm_num_requests_waiting"],
         "verbs": ["get", "list"]},
        {"apiGroups": ["external.metrics.k8s.io"], "resources": ["queue_depth"], "verbs": ["get", "list"]},
    ]


# --- RBAC: least privilege ----------------------------------------------------------------------


def _all_roles() -> Iterator[tuple[str, Obj]]:
    for where, render in RENDERS.items():
        for o in render():
            if o["kind"] in ROLE_KINDS:
                yield where, o
    for path in sorted((MANIFESTS / "rbac").glob("*.yaml")):
        for o in _docs(path.read_text()):
            if o["kind"] in ROLE_KINDS:
                yield f"manifests/rbac/{path.name}", o


def test_no_role_has_a_wildcard() -> None:
    found = []
    for where, role in _all_roles():
        for i, rule in enumerate(role.get("rules") or []):
            for field in ("verbs", "resources", "apiGroups", "nonResourceURLs"):
                bad = [v for v in rule.get(field, []) if "*" in v]
                if bad:
                    name = f"{role['kind']} {role['metadata']['name']}"
                    found.append(f"{where}: {name} rules[{i}].{field} {bad}")
    assert not found, "\n".join(found)


def test_no_cluster_role_grants_secrets() -> None:
    for where, role in _all_roles():
        for rule in role.get("rules") or []:
            if "secrets" in rule.get("resources", []):
                name = role["metadata"]["name"]
                assert role["kind"] == "Role", f"{where}: ClusterRole {name} grants Secrets"


def test_every_binding_names_a_service_account_of_the_release() -> None:
    for where in ("base", "chart defaults"):
        objs = RENDERS[where]()
        accounts = set(by_kind(objs, "ServiceAccount"))
        roles = {(o["kind"], o["metadata"]["name"]) for o in objs if o["kind"] in ROLE_KINDS}
        for b in (o for o in objs if o["kind"] in BINDING_KINDS):
            assert (b["roleRef"]["kind"], b["roleRef"]["name"]) in roles, (where, b["metadata"]["name"])
            for s in b["subjects"]:
                assert s["kind"] == "ServiceAccount" and s["name"] in accounts, (where, s)
                assert s["namespace"] == NAMESPACE, (where, s)


# --- Deployments --------------------------------------------------------------------------------


def _ports(container: Obj) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container.get("ports", [])}


def _served_ports(container: Obj) -> set[int]:
    """The TCP ports the process binds, from its own flags."""
    args = flags_of(container)
    addresses = ([args.metrics_bind_address, args.health_probe_bind_address, args.api_bind_address]
                 if args.command == "manager" else [args.bind_address])
    ports = {bound[1] for a in addresses if (bound := parse_bind_address(a)) is not None}
    if args.command == "manager" and args.webhook_port:
        ports.add(args.webhook_port)
    return ports


def _probe_port(container: Obj) -> int:
    """The port of ``/healthz`` and ``/readyz``: the manager's probe server, the SLO API's only one."""
    args = flags_of(container)
    address = args.health_probe_bind_address if args.command == "manager" else args.bind_address
    bound = parse_bind_address(address)
    assert bound is not None, f"{container['name']} serves no probes"
    return bound[1]


def _assert_mounted_secret(dep: Obj, path: str, secret: str) -> None:
    spec = dep["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert path in mounts and mounts[path].get("readOnly"), f"{path} is not mounted read-only"
    volume = next(v for v in spec["volumes"] if v["name"] == mounts[path]["name"])
    assert volume["secret"]["secretName"] == secret


@pytest.mark.parametrize("where", list(RENDERS))
def test_every_deployment_is_locked_down(where: str) -> None:
    objs = RENDERS[where]()
    seen = 0
    for name, dep, c in containers(objs):
        seen += 1
        what = f"{where}: Deployment {name} container {c['name']}"
        pod = dep["spec"]["template"]["spec"]
        psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
        assert psc.get("runAsNonRoot") is True or csc.get("runAsNonRoot") is True, what
        assert (csc.get("seccompProfile") or psc.get("seccompProfile")) == {"type": "RuntimeDefault"}, what
        assert csc.get("allowPrivilegeEscalation") is False, what
        assert csc.get("readOnlyRootFilesystem") is True, what
        assert csc.get("capabilities", {}).get("drop") == ["ALL"], what
        assert not csc.get("privileged") and not csc.get("capabilities", {}).get("add"), what
        for bound in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c["resources"].get(bound, {})), f"{what}: resources.{bound}"
        image = SLO_API_IMAGE if c["name"] == "slo-api" else IMAGE
        assert c["image"] == image, f"{what}: image {c['image']}"
        assert pod.get("automountServiceAccountToken", True) and pod["serviceAccountName"], what
        # probes: HTTP GETs of /healthz and /readyz on the port the process serves them on
        ports = _ports(c)
        served = _served_ports(c)
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = c[probe]["httpGet"]
            assert get["path"] == path, f"{what}: {probe} path {get['path']}"
            assert ports.get(get["port"]) == _probe_port(c), f"{what}: {probe} port {get['port']}"
        assert set(ports.values()) == served, f"{what}: container ports {ports} vs served {served}"
        # the writable /tmp (the image's MPLCONFIGDIR, the API's self-signed certificate)
        tmp = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
        assert tmp and any(v["name"] == tmp[0]["name"] and "emptyDir" in v for v in pod["volumes"]), what
    assert seen >= 1


@pytest.mark.parametrize("where", ["base", "chart defaults"])
def test_the_manager_is_leader_elected_and_shuts_down_within_its_grace_period(where: str) -> None:
    dep = one(RENDERS[where](), "Deployment", "escaler-manager")
    pod = dep["spec"]["template"]["spec"]
    args = flags_of(pod["containers"][0])
    assert dep["spec"]["replicas"] == 2 and args.leader_elect
    assert args.leader_election_namespace == ""  # the pod's own namespace, where the Role grants leases
    grace = pod["terminationGracePeriodSeconds"]
    assert DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT < grace <= DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT + 10
    assert (args.log_format, args.log_level, args.metrics_trigger_poll_interval) == ("json", "info", 30.0)


# what nothing shipped may say: the test clock's flag, or its argparse dest (a values key, an env name)
TEST_CLOCK_MARKERS = (TEST_CLOCK_FLAG.lstrip("-"), TEST_CLOCK_FLAG.lstrip("-").replace("-", "_"))


def test_nothing_shipped_mentions_the_test_clock() -> None:
    """``--unsafe-test-clock-file`` is for end-to-end tests only: no manifest, chart file, packaged
    data file or image definition passes (or even names) it."""
    roots = (MANIFESTS, CHART, ROOT / "escaler" / "data")
    files = [p for root in roots for p in root.rglob("*") if p.is_file()]
    files.append(ROOT / "Dockerfile")
    assert len(files) > 20, files
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace").lower()
        for marker in TEST_CLOCK_MARKERS:
            assert marker not in text, f"{path.relative_to(ROOT)} mentions {marker}"


@pytest.mark.parametrize("where", list(RENDERS))
def test_every_rendered_process_runs_on_the_real_clock(where: str) -> None:
    for name, _, c in containers(RENDERS[where]()):
        assert getattr(flags_of(c), "unsafe_test_clock_file", None) is None, name


def test_the_dev_overlay_runs_one_manager_with_debug_console_logs() -> None:
    objs = kustomize("overlays/dev")
    assert one(objs, "Deployment", "escaler-manager")["spec"]["replicas"] == 1
    for name, _, c in containers(objs):
        args = flags_of(c)
        assert (args.log_format, args.log_level) == ("console", "debug"), name
    assert "ValidatingWebhookConfiguration" not in {o["kind"] for o in objs}


def test_the_production_overlay_has_the_webhook_a_pdb_and_spread() -> None:
    objs = kustomize("overlays/production")
    dep = one(objs, "Deployment", "escaler-manager")
    assert dep["spec"]["replicas"] == 2
    args = flags_of(dep["spec"]["template"]["spec"]["containers"][0])
    assert args.webhook_port == 9443 and args.log_format == "json"
    assert (args.webhook_cert_dir, args.webhook_configuration) == ("", "escaler-validating-webhook")
    pdb = one(objs, "PodDisruptionBudget", "escaler-manager")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    spread = dep["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert {s["topologyKey"] for s in spread} == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    config = one(objs, "ValidatingWebhookConfiguration", "escaler-validating-webhook")
    service = one(objs, "Service", "escaler-webhook")
    assert {h["clientConfig"]["service"]["name"] for h in config["webhooks"]} == {"escaler-webhook"}
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"


# --- Services and NetworkPolicies ---------------------------------------------------------------


def _pods_of(objs: tuple[Obj, ...], selector: dict[str, str]) -> list[Obj]:
    return [c for _, dep, c in containers(objs)
            if selector.items() <= dep["spec"]["template"]["metadata"]["labels"].items()]


@pytest.mark.parametrize("where", list(RENDERS))
def test_every_service_reaches_a_served_port(where: str) -> None:
    objs = RENDERS[where]()
    for name, svc in by_kind(objs, "Service").items():
        pods = _pods_of(objs, svc["spec"]["selector"])
        assert pods, f"{where}: Service {name} selects no pod"
        for port in svc["spec"]["ports"]:
            for c in pods:
                target = _ports(c).get(port["targetPort"])
                assert target in _served_ports(c), f"{where}: Service {name} {port}"


@pytest.mark.parametrize("where", list(RENDERS))
def test_network_policies_admit_exactly_the_served_ports(where: str) -> None:
    objs = RENDERS[where]()
    policies = by_kind(objs, "NetworkPolicy")
    for name, _, c in containers(objs):
        dep_labels = one(objs, "Deployment", name)["spec"]["template"]["metadata"]["labels"]
        mine = [p for p in policies.values()
                if p["spec"]["podSelector"]["matchLabels"].items() <= dep_labels.items()]
        assert len(mine) == 1, f"{where}: Deployment {name} has {len(mine)} NetworkPolicies"
        spec = mine[0]["spec"]
        assert spec["policyTypes"] == ["Ingress", "Egress"]
        admitted = {p["port"] for rule in spec["ingress"] for p in rule["ports"]}
        # the manager's probe server is admitted from no pod: the kubelet calls from the node, which
        # a NetworkPolicy always allows; the SLO API serves its probes on its API port
        node_only = {_probe_port(c)} if flags_of(c).command == "manager" else set()
        assert admitted == _served_ports(c) - node_only, f"{where}: {name} ingress {admitted}"
        # every port but the webhook's (the API server's address is no pod's) says who may call it
        webhook = flags_of(c).webhook_port if flags_of(c).command == "manager" else None
        for rule in spec["ingress"]:
            if {p["port"] for p in rule["ports"]} != {webhook}:
                assert rule.get("from"), f"{where}: {name} admits {rule['ports']} from anywhere"
        egress = {(p["protocol"], p["port"]) for rule in spec["egress"] for p in rule["ports"]}
        assert {("UDP", 53), ("TCP", 53), ("TCP", 443), ("TCP", 6443)} <= egress, f"{where}: {name}"


def test_the_namespace_enforces_the_restricted_pod_security_standard() -> None:
    ns = one(kustomize("base"), "Namespace", NAMESPACE)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    namespaced = [o for o in kustomize("base") if o["kind"] not in (
        "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding")]
    assert {o["metadata"].get("namespace") for o in namespaced} == {NAMESPACE}


def test_tenant_promql_is_confined_by_default_and_the_chart_sets_the_flags() -> None:
    """Issue 27 item 4: the manager the chart runs confines tenant PromQL (the default), and the
    values reach its flags; a label that is not a label name is refused by the schema."""
    default = one(chart(), "Deployment", "escaler-manager")["spec"]["template"]["spec"]["containers"][0]
    assert flags_of(default).promql_namespace_label == "namespace"
    assert not [a for a in default["args"] if a.startswith("--promql")]
    objs = chart("manager.promql.namespaceLabel=kubernetes_namespace",
                 "manager.promql.unconfinedHosts=prom.team-a.svc")
    dep = one(objs, "Deployment", "escaler-manager")
    flags = flags_of(dep["spec"]["template"]["spec"]["containers"][0])
    assert (flags.promql_namespace_label, flags.promql_unconfined_hosts) == ("kubernetes_namespace",
                                                                            ("prom.team-a.svc",))
    r = helm("template", "escaler", str(CHART), "--set", "manager.promql.namespaceLabel=a-b")
    assert r.returncode != 0 and "namespaceLabel" in r.stderr, r.stderr
