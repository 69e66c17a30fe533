#!/usr/bin/env bash
# Generate a self-signed CA and a serving certificate for escaler's validating webhook.
#
# Usage: hack/webhook-certs.sh OUT_DIR [SERVICE] [NAMESPACE]
#   SERVICE defaults to escaler-webhook, NAMESPACE to escaler-system; DAYS (env) to 365.
#
# Writes, into OUT_DIR (created if needed):
#   ca.crt  ca.key    the CA (ca.crt is what hack/webhook-patch-cabundle.sh puts in caBundle)
#   tls.crt tls.key   the serving pair, the names a kubernetes.io/tls Secret (and cert-manager)
#                     mounts, so the directory can be passed as --webhook-cert-dir as is
# The serving certificate's SANs cover the in-cluster Service names (SERVICE, SERVICE.NAMESPACE,
# SERVICE.NAMESPACE.svc, SERVICE.NAMESPACE.svc.cluster.local) and loopback (localhost,
# 127.0.0.1, ::1) for a manager run on the API server's machine. Keys are ECDSA P-256, mode 0600.
# Existing files in OUT_DIR are replaced. Requires openssl (1.1.1 or later).
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 3 ]; then
  echo "usage: $0 OUT_DIR [SERVICE] [NAMESPACE]" >&2
  exit 2
fi
out="$1"
service="${2:-escaler-webhook}"
namespace="${3:-escaler-system}"
days="${DAYS:-365}"

command -v openssl >/dev/null || { echo "$0: openssl not found" >&2; exit 1; }
mkdir -p "$out"
umask 077
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

serial() { echo "0x$(openssl rand -hex 16)"; }

# the CA
openssl ecparam -name prime256v1 -genkey -noout -out "$tmp/ca.key"
openssl req -x509 -new -key "$tmp/ca.key" -sha256 -days "$days" -set_serial "$(serial)" \
  -subj "/CN=escaler-webhook-ca" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out "$tmp/ca.crt" 2>/dev/null

# the serving certificate, signed by the CA
cat >"$tmp/serving.cnf" <<CNF
[v3]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = @alt
[alt]
DNS.1 = ${service}
DNS.2 = ${service}.${namespace}
DNS.3 = ${service}.${namespace}.svc
DNS.4 = ${service}.${namespace}.svc.cluster.local
DNS.5 = localhost
IP.1 = 127.0.0.1
IP.2 = ::1
CNF
openssl ecparam -name prime256v1 -genkey -noout -out "$tmp/tls.key"
openssl req -new -key "$tmp/tls.key" -subj "/CN=${service}.${namespace}.svc" -out "$tmp/tls.csr"
openssl x509 -req -in "$tmp/tls.csr" -CA "$tmp/ca.crt" -CAkey "$tmp/ca.key" -set_serial "$(serial)" \
  -sha256 -days "$days" -extfile "$tmp/serving.cnf" -extensions v3 -out "$tmp/tls.crt" 2>/dev/null
openssl verify -CAfile "$tmp/ca.crt" "$tmp/tls.crt" >/dev/null

# move into place together, so a reader never sees a new cert with an old key
for f in ca.crt ca.key tls.crt tls.key; do
  mv -f "$tmp/$f" "$out/$f"
done
chmod 0644 "$out/ca.crt" "$out/tls.crt"
echo "wrote $out/{ca.crt,ca.key,tls.crt,tls.key} for ${service}.${namespace}.svc" >&2
