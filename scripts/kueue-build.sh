#!/usr/bin/env bash
# Builds (once per machine) the Kueue controller manager for the Kueue comparison
# (scripts/kueue-compare.sh), from the Go module pinned in testenv/kueue, and keeps its CRDs beside it:
#   ${TUNEPLANE_TESTENV_CACHE:-~/.cache/tuneplane-testenv}/kueue-<v>/{bin/kueue,crds/}
# Prints that folder as its last line. A second run with the same version builds nothing.
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
echo "$OUT"
