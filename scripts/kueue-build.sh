#!/usr/bin/env bash
# Builds (once per machine) the Kueue controller manager for the Kueue comparison
# (scripts/kueue-compare.sh), from the Go module pinned in testenv/kueue, and keeps its CRDs beside it:
#   ${TUNEPLANE_TESTENV_CACHE:-~/.cache/tuneplane-testenv}/kueue-<v>/{bin/kueue,crds/}
# Prints that folder as its last line. A second run with the same version builds nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${TUNEPLANE_TESTENV_CACHE:-$HOME/.cache/tuneplane-testenv}"

say() { printf '[kueue-build] %s\n' "$*" >&2; }
die() { printf '[kueue-build] error: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH; Kueue is built from its Go module (go 1.25 or newer)"
export GOFLAGS="${GOFLAGS:-} -mod=readonly"

VERSION=$(cd "$ROOT/testenv/kueue" && go list -m -f '{{.Version}}' sigs.k8s.io/kueue) \
  || die "cannot resolve sigs.k8s.io/kueue in testenv/kueue (is the Go module proxy reachable?)"
OUT="$CACHE/kueue-${VERSION#v}"
mkdir -p "$OUT/bin"

if [[ ! -x "$OUT/bin/kueue" ]]; then
  say "building kueue $VERSION (first run on this machine, about 5 minutes on 2 cores; cached in $OUT)"
  start=$SECONDS
  (cd "$ROOT/testenv/kueue" && go build -ldflags="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$VERSION" \
    -o "$OUT/bin/.kueue.tmp" sigs.k8s.io/kueue/cmd/kueue) || die "go build of sigs.k8s.io/kueue/cmd/kueue failed (see above)"
  mv "$OUT/bin/.kueue.tmp" "$OUT/bin/kueue"
  say "built kueue in $((SECONDS - start)) s"
fi

# Kueue's CRDs, from the same module source the binary was built from.
if [[ ! -d "$OUT/crds" ]]; then
  src=$(cd "$ROOT/testenv/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  mkdir -p "$OUT/.crds.tmp"
  cp "$src"/config/components/crd/bases/*.yaml "$OUT/.crds.tmp/"
  chmod -R u+w "$OUT/.crds.tmp"
  mv "$OUT/.crds.tmp" "$OUT/crds"
fi
echo "$OUT"
