#!/usr/bin/env bash
# Builds the test tier's NetworkPolicy evaluator (testenv/netpol: cyclonus's policy matcher behind
# a JSON-in, verdicts-out command) once per machine, cached in ~/.cache/tuneplane-testenv; prints
# the binary's path on the last line. core/tests/network_policy.rs runs it on the policies
# TunePlane renders (fake nodes enforce no policy, so their meaning is checked here).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testenv-lib.sh"

require_go "the NetworkPolicy evaluator is built from Go modules (go 1.24 or newer)"
CYCLONUS=$(module_version netpol github.com/mattfenwick/cyclonus)
SUM=$(cat "$ROOT/testenv/netpol/main.go" "$ROOT/testenv/netpol/go.sum" | sha256sum | cut -c1-12)
OUT="$CACHE/netpol-eval_cyclonus-${CYCLONUS#v}_$SUM"
mkdir -p "$OUT"
if [[ ! -x "$OUT/netpol-eval" ]]; then
  say "building netpol-eval (cyclonus $CYCLONUS; first run on this machine; cached in $OUT)"
  go_build netpol . "$OUT/netpol-eval" "-s -w"
fi
echo "$OUT/netpol-eval"
