#!/usr/bin/env bash
# Builds (once per machine) the runtimes that play container images on the real test tier's node
# agent (testenv/images.yaml): Python virtualenvs with pinned packages, cached outside the checkout
# under ${TUNEPLANE_TESTENV_CACHE:-~/.cache/tuneplane-testenv}/runtimes-<hash of the pins>/:
#   ray/     ray[default] (Ray, its dashboard, job CLI and runtime-env agent)
#   python/  the system Python, nothing installed (so `python` and `python3` exist)
# Prints that folder as its last line (the agent's TUNEPLANE_RUNTIMES). A second run builds nothing.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testenv-lib.sh"

PYTHON="${PYTHON:-python3}"
RAY_PINS=("ray[default]==2.60.0")
KEY=$(printf '%s\n' "${RAY_PINS[@]}" "$("$PYTHON" -c 'import sys; print(sys.version.split()[0])')" | sha256sum | cut -c1-12)
OUT="$CACHE/runtimes-$KEY"

venv() { # name, packages...
  local name=$1; shift
  [[ -f "$OUT/$name/.done" ]] && return
  local tmp="$OUT/.$name.tmp"
  rm -rf "$tmp"
  say "creating the $name runtime (first run on this machine; cached in $OUT)"
  "$PYTHON" -m venv "$tmp" || die "'$PYTHON -m venv' failed (apt-get install python3-venv)"
  if (($#)); then
    "$tmp/bin/python" -m pip install --quiet --disable-pip-version-check "$@" \
      || die "pip install $* failed (is PyPI reachable?)"
  fi
  touch "$tmp/.done"
  # A virtualenv records its own path: build it where it will live.
  rm -rf "$OUT/$name"
  mv "$tmp" "$OUT/$name"
  # Scripts' shebangs name the temporary folder: point them at the final one.
  grep -rlI "$tmp" "$OUT/$name/bin" | xargs -r sed -i "s|$tmp|$OUT/$name|g"
}

mkdir -p "$OUT"
venv python
venv ray "${RAY_PINS[@]}"
"$OUT/ray/bin/ray" --version >/dev/null || die "the ray runtime does not start ($OUT/ray/bin/ray)"
echo "$OUT"
