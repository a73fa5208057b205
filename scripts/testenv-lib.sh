# shellcheck shell=bash
# Sourced (not run) by the scripts that build the test tier from the Go modules pinned in testenv/
# (testenv-build.sh, kueue-build.sh): the checkout root, the per-machine cache, log helpers tagged with
# the calling script's name, and the build steps both share. Every build writes to a temporary name and
# renames it when done, so an interrupted run never leaves a half-written binary or CRD folder behind.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${TUNEPLANE_TESTENV_CACHE:-$HOME/.cache/tuneplane-testenv}"
TAG="$(basename "$0" .sh)"

say() { printf '[%s] %s\n' "$TAG" "$*" >&2; }
die() { printf '[%s] error: %s\n' "$TAG" "$*" >&2; exit 1; }

# Fails unless go is on PATH (the argument says which version is needed and why), and keeps go from
# editing the pinned go.mod/go.sum: modules come through the Go module proxy only, no binary is downloaded.
require_go() { # what needs go
  command -v go >/dev/null 2>&1 || die "go is not on PATH; $1"
  export GOFLAGS="${GOFLAGS:-} -mod=readonly"
}

module_version() { # module dir under testenv/, module path
  (cd "$ROOT/testenv/$1" && go list -m -f '{{.Version}}' "$2") \
    || die "cannot resolve $2 in testenv/$1 (is the Go module proxy reachable?)"
}

go_build() { # module dir under testenv/, package, output binary, ldflags
  local dir=$1 pkg=$2 out=$3 ldflags=$4 start=$SECONDS
  local tmp
  tmp="$(dirname "$out")/.$(basename "$out").tmp"
  (cd "$ROOT/testenv/$dir" && go build -ldflags="$ldflags" -o "$tmp" "$pkg") \
    || die "go build of $pkg failed (see the output above)"
  mv "$tmp" "$out"
  say "built $(basename "$out") in $((SECONDS - start)) s"
}

# Copies a module's CRDs (from the same module source the binary was built from) once.
copy_crds() { # module dir under testenv/, module path, CRD folder inside the module, destination
  local dir=$1 module=$2 from=$3 dest=$4
  [[ -d $dest ]] && return
  local src tmp
  src=$(cd "$ROOT/testenv/$dir" && go list -m -f '{{.Dir}}' "$module")
  tmp="$(dirname "$dest")/.$(basename "$dest").tmp"
  mkdir -p "$tmp"
  cp "$src/$from"/*.yaml "$tmp/"
  chmod -R u+w "$tmp"
  mv "$tmp" "$dest"
}
