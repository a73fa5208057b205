#!/usr/bin/env bash
# Builds (once per machine) the real Kubernetes components of the test tier from the Go modules pinned
# in testenv/: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the KubeRay operator.
# Binaries are cached outside the checkout, under a folder named by the pinned versions:
#   ${TUNEPLANE_TESTENV_CACHE:-~/.cache/tuneplane-testenv}/k8s-<v>_etcd-<v>_kuberay-<v>/bin/
# Prints that bin folder as its last line. A second run with the same versions builds nothing.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testenv-lib.sh"

require_go "the test tier builds Kubernetes from Go modules (go 1.24 or newer)"
K8S=$(module_version kube k8s.io/kubernetes)
ETCD=$(module_version etcd go.etcd.io/etcd/server/v3)
KUBERAY=$(module_version kuberay github.com/ray-project/kuberay/ray-operator)
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
  local ldflags="-s -w"
  [[ $1 == kube ]] && ldflags="$ldflags $KUBE_LDFLAGS"
  [[ -x "$BIN/$3" ]] && return
  say "building $3 from $2 (first run on this machine; cached in $BIN)"
  go_build "$1" "$2" "$BIN/$3" "$ldflags"
}

build etcd go.etcd.io/etcd/server/v3 etcd
build kube k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver
build kube k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager
build kube k8s.io/kubernetes/cmd/kube-scheduler kube-scheduler
build kuberay github.com/ray-project/kuberay/ray-operator kuberay-operator

# The operator's own CRDs, from the same module source the operator was built from.
copy_crds kuberay github.com/ray-project/kuberay/ray-operator config/crd/bases "$OUT/crds"
echo "$BIN"
