#!/usr/bin/env bash
# Builds (once per machine) the Kueue controller manager for the Kueue comparison
# (scripts/kueue-compare.sh), from the Go module pinned in testenv/kueue, and keeps its CRDs and the
# RBAC of its controller manager (role, bindings, leader election, secrets) beside it:
#   ${TUNEPLANE_TESTENV_CACHE:-~/.cache/tuneplane-testenv}/kueue-<v>/{bin/kueue,crds/,rbac/}
# It also builds the KubeRay operator the comparison runs for both systems (testenv/kuberay-compare,
# v1.5.0: the first release with a client-limit option) with its CRDs:
#   ${TUNEPLANE_TESTENV_CACHE:-~/.cache/tuneplane-testenv}/kuberay-compare-<v>/{bin/kuberay-operator,crds/}
# Prints the KubeRay folder, then the Kueue folder as its last line. A second run with the same
# versions builds nothing.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testenv-lib.sh"

require_go "Kueue is built from its Go module (go 1.25 or newer)"
VERSION=$(module_version kueue sigs.k8s.io/kueue)
OUT="$CACHE/kueue-${VERSION#v}"
mkdir -p "$OUT/bin"

if [[ ! -x "$OUT/bin/kueue" ]]; then
  say "building kueue $VERSION (first run on this machine, about 5 minutes on 2 cores; cached in $OUT)"
  go_build kueue sigs.k8s.io/kueue/cmd/kueue "$OUT/bin/kueue" \
    "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$VERSION"
fi
copy_crds kueue sigs.k8s.io/kueue config/components/crd/bases "$OUT/crds"
if [[ ! -d "$OUT/rbac" ]]; then
  SRC=$(cd "$ROOT/testenv/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  mkdir -p "$OUT/.rbac.tmp"
  for f in role role_binding leader_election_role leader_election_role_binding manager_secrets_role manager_secrets_role_binding; do
    cp "$SRC/config/components/rbac/$f.yaml" "$OUT/.rbac.tmp/"
  done
  chmod -R u+w "$OUT/.rbac.tmp"
  mv "$OUT/.rbac.tmp" "$OUT/rbac"
fi
KUBERAY=$(module_version kuberay-compare github.com/ray-project/kuberay/ray-operator)
KR_OUT="$CACHE/kuberay-compare-${KUBERAY#v}"
mkdir -p "$KR_OUT/bin"
if [[ ! -x "$KR_OUT/bin/kuberay-operator" ]]; then
  say "building the KubeRay operator $KUBERAY for the comparison (first run on this machine; cached in $KR_OUT)"
  go_build kuberay-compare github.com/ray-project/kuberay/ray-operator "$KR_OUT/bin/kuberay-operator" "-s -w"
fi
copy_crds kuberay-compare github.com/ray-project/kuberay/ray-operator config/crd/bases "$KR_OUT/crds"
echo "$KR_OUT"
echo "$OUT"
