#!/usr/bin/env bash
# Builds (once per machine) the real Kubernetes components of the test tier from the Go modules pinned
# in testenv/: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the KubeRay operator.
# Binaries are cached outside the checkout, under a folder named by the pinned versions:
#   ${TUNEPLANE_TESTENV_CACHE:-~/.cache/tuneplane-testenv}/k8s-<v>_etcd-<v>_kuberay-<v>/bin/
# Prints that bin folder as its last line. A second run with the same versions builds nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${TUNEPLANE_TESTENV_CACHE:-$HOME/.cache/tuneplane-testenv}"

say() { printf '[testenv-build] %s\n' "$*" >&2; }
die() { printf '[testenv-build] error: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH; the test tier builds Kubernetes from Go modules (go 1.24 or newer)"
# The modules are fetched through the Go module proxy only; no binary is downloaded from anywhere.
export GOFLAGS="${GOFLAGS:-} -mod=readonly"

version_of() { # module dir, module path
  (cd "$ROOT/testenv/$1" && go list -m -f '{{.Version}}' "$2") || die "cannot resolve $2 in testenv/$1 (is the Go module proxy reachable?)"
}
K8S=$(version_of kube k8s.io/kubernetes)
ETCD=$(version_of etcd go.etcd.io/etcd/server/v3)
KUBERAY=$(version_of kuberay github.com/ray-project/kuberay/ray-operator)
OUT="$CACHE/k8s-${K8S#v}_etcd-${ETCD#v}_kuberay-${KUBERAY#v}"
BIN="$OUT/bin"
mkdir -p "$BIN"

# The Kubernetes binaries report the release they were built from (kubectl version, /version).
KVER=${K8S#v}; KMAJOR=${KVER%%.*}; KMINOR=${KVER#*.}; KMINOR=${KMINOR%%.*}
KUBE_LDFLAGS="-X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=$KMAJOR \
-X k8s.io/component-base/version.gitMinor=$KMINOR -X k8s.io/component-base/version.gitTreeState=clean \
-X k8s.io/client-go/pkg/version.gitVersion=$K8S -X k8s.io/client-go/pkg/version.gitMajor=$KMAJOR \
-X k8s.io/client-go/pkg/version.gitMinor=$KMINOR"

build() { # module dir, package, binary name
  local dir=$1 pkg=$2 name=$3 ldflags="-s -w"
  [[ $dir == kube ]] && ldflags="$ldflags $KUBE_LDFLAGS"
  if [[ -x "$BIN/$name" ]]; then
    return
  fi
  say "building $name from $pkg (first run on this machine; cached in $BIN)"
  local start=$SECONDS
  (cd "$ROOT/testenv/$dir" && go build -ldflags="$ldflags" -o "$BIN/.$name.tmp" "$pkg") \
    || die "go build of $pkg failed (see the output above)"
  mv "$BIN/.$name.tmp" "$BIN/$name"
  say "built $name in $((SECONDS - start)) s"
}

build etcd go.etcd.io/etcd/server/v3 etcd
build kube k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver
build kube k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager
build kube k8s.io/kubernetes/cmd/kube-scheduler kube-scheduler
build kuberay github.com/ray-project/kuberay/ray-operator kuberay-operator

# The operator's own CRDs, from the same module source the operator was built from.
if [[ ! -d "$OUT/crds" ]]; then
  src=$(cd "$ROOT/testenv/kuberay" && go list -m -f '{{.Dir}}' github.com/ray-project/kuberay/ray-operator)
  mkdir -p "$OUT/.crds.tmp"
  cp "$src"/config/crd/bases/*.yaml "$OUT/.crds.tmp/"
  chmod -R u+w "$OUT/.crds.tmp"
  mv "$OUT/.crds.tmp" "$OUT/crds"
fi
echo "$BIN"
