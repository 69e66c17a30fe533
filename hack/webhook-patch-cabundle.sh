#!/usr/bin/env bash
# Put a CA certificate into every webhook's clientConfig.caBundle of escaler's
# ValidatingWebhookConfiguration (manifests/webhook/validating-webhook-configuration.yaml ships a
# placeholder, so the API server refuses every call — failurePolicy Fail — until this runs).
#
# Usage: hack/webhook-patch-cabundle.sh CA_FILE [CONFIGURATION_NAME]
#   CA_FILE: PEM file of the CA that signed the webhook's serving certificate (hack/webhook-certs.sh
#            writes OUT_DIR/ca.crt); CONFIGURATION_NAME defaults to escaler-validating-webhook.
#   KUBECTL (env) is the kubectl command (default: kubectl); KUBECONFIG is honoured as usual.
# Not needed with cert-manager's CA injector (annotate the configuration with
# cert-manager.io/inject-ca-from instead).
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 CA_FILE [CONFIGURATION_NAME]" >&2
  exit 2
fi
ca_file="$1"
name="${2:-escaler-validating-webhook}"
kubectl="${KUBECTL:-kubectl}"

[ -s "$ca_file" ] || { echo "$0: $ca_file: missing or empty" >&2; exit 1; }
grep -q "BEGIN CERTIFICATE" "$ca_file" || { echo "$0: $ca_file: not a PEM certificate" >&2; exit 1; }
bundle="$(base64 <"$ca_file" | tr -d '\n')"

names="$($kubectl get validatingwebhookconfiguration "$name" -o jsonpath='{range .webhooks[*]}{.name}{"\n"}{end}')"
count="$(printf '%s' "$names" | grep -c . || true)"
if [ "$count" -eq 0 ]; then
  echo "$0: validatingwebhookconfiguration/$name has no webhooks" >&2
  exit 1
fi

patch="["
for ((i = 0; i < count; i++)); do
  [ "$i" -gt 0 ] && patch+=","
  # JSON-patch "add" replaces the member when it exists
  patch+="{\"op\":\"add\",\"path\":\"/webhooks/$i/clientConfig/caBundle\",\"value\":\"$bundle\"}"
done
patch+="]"
$kubectl patch validatingwebhookconfiguration "$name" --type=json -p "$patch"
