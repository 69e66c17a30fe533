#!/usr/bin/env bash
# Build the local control plane's binaries from the Go module proxy, pinned by hack/versions.env,
# into ~/.cache/escaler/<component>-<version>/bin. Idempotent: a component whose binaries and
# stamp exist is not rebuilt. Prints the directory holding every binary (one per line: NAME=PATH)
# to stdout when --print is given.
#
# Usage: hack/build.sh [--print] [component...]   components: k8s etcd kwok helm (default: all)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
CACHE="${ESCALER_CACHE:-$HOME/.cache/escaler}"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0

print=0
comps=()
for a in "$@"; do
  case "$a" in
    --print) print=1 ;;
    k8s|etcd|kwok|helm) comps+=("$a") ;;
    *) echo "build.sh: unknown argument '$a' (expected --print, k8s, etcd, kwok or helm)" >&2; exit 2 ;;
  esac
done
[ ${#comps[@]} -gt 0 ] || comps=(k8s etcd kwok helm)

log() { echo "[build] $*" >&2; }

stamp_ok() { [ -f "$1/.stamp" ] && [ "$(cat "$1/.stamp")" = "$2" ]; }

build_k8s() {
  local out="$CACHE/k8s-$K8S_VERSION" key="k8s=$K8S_VERSION staging=$K8S_STAGING_VERSION"
  if stamp_ok "$out" "$key"; then return; fi
  log "building Kubernetes $K8S_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)"
  local src="$CACHE/src/k8s-$K8S_VERSION"
  rm -rf "$src"; mkdir -p "$src" "$out/bin"
  cp "$here/k8s/tools.go" "$src/"
  (
    cd "$src"
    go mod init escaler.local/hack/k8s >/dev/null 2>&1
    go mod edit -go=1.26.0 -require="k8s.io/kubernetes@$K8S_VERSION"
    # Every staging module is required as v0.0.0 by k8s.io/kubernetes; point each at its release.
    local mods
    mods=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    for m in $(awk '/^\t?k8s.io\/[a-z-]+ v0.0.0$/ {print $1}' "$mods"); do
      go mod edit -replace="$m=$m@$K8S_STAGING_VERSION"
    done
    go mod tidy >&2
    local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
    local pkg ldf=""
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldf+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
      ldf+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    done
    for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
      log "  go build $cmd"
      go build -trimpath -ldflags "-s -w$ldf" -o "$out/bin/$cmd" "k8s.io/kubernetes/cmd/$cmd"
    done
  )
  echo "$key" > "$out/.stamp"
}

build_etcd() {
  local out="$CACHE/etcd-$ETCD_VERSION" key="etcd=$ETCD_VERSION"
  if stamp_ok "$out" "$key"; then return; fi
  log "building etcd $ETCD_VERSION"
  local src="$CACHE/src/etcd-$ETCD_VERSION"
  rm -rf "$src"; mkdir -p "$src" "$out/bin"
  cp "$here/etcd/main.go" "$src/"
  (
    cd "$src"
    go mod init escaler.local/hack/etcd >/dev/null 2>&1
    go mod edit -go=1.26.0 -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    go mod tidy >&2
    go build -trimpath -ldflags "-s -w" -o "$out/bin/etcd" .
  )
  echo "$key" > "$out/.stamp"
}

build_goinstall() { # name version package [extra ldflags]
  local name="$1" ver="$2" pkg="$3" extra="${4:-}"
  local out="$CACHE/$name-$ver" key="$name=$ver ldflags=$extra"
  if stamp_ok "$out" "$key"; then return; fi
  log "building $name $ver"
  mkdir -p "$out/bin"
  GOBIN="$out/bin" go install -trimpath -ldflags "-s -w $extra" "$pkg@$ver"
  echo "$key" > "$out/.stamp"
}

for c in "${comps[@]}"; do
  t0=$SECONDS
  case "$c" in
    k8s) build_k8s ;;
    etcd) build_etcd ;;
    kwok)
      build_goinstall kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
      # The kwok binary simulates nothing without Stage configs (kwokctl embeds them; we ship the
      # same "fast" node and pod stages from the module's source next to the binary).
      st="$CACHE/kwok-$KWOK_VERSION/stages.yaml"
      if [ ! -s "$st" ]; then
        mod="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
        [ -d "$mod" ] || go mod download "sigs.k8s.io/kwok@$KWOK_VERSION"
        for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml pod/fast/pod-ready.yaml \
                 pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
          cat "$mod/$f"; echo "---"
        done > "$st.tmp" && mv "$st.tmp" "$st"
      fi
      ;;
    helm) build_goinstall helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm \
            "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" ;;
  esac
  if [ $((SECONDS - t0)) -gt 2 ]; then log "$c built in $((SECONDS - t0))s"; fi
done

if [ "$print" = 1 ]; then
  for c in "${comps[@]}"; do
    case "$c" in
      k8s) for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do echo "$b=$CACHE/k8s-$K8S_VERSION/bin/$b"; done ;;
      etcd) echo "etcd=$CACHE/etcd-$ETCD_VERSION/bin/etcd" ;;
      kwok) echo "kwok=$CACHE/kwok-$KWOK_VERSION/bin/kwok"; echo "kwok-stages=$CACHE/kwok-$KWOK_VERSION/stages.yaml" ;;
      helm) echo "helm=$CACHE/helm-$HELM_VERSION/bin/helm" ;;
    esac
  done
fi
