#!/usr/bin/env bash
# Builds the AWS stack's three Lambda bootstraps (api, scheduled, inbox) exactly as a deployer does:
# the pinned deploy tools from PyPI into .venv-deploy/ (aws-sam-cli, cargo-lambda, ziglang for
# cross-linking), the aarch64 Rust target, then `sam build --beta-features` (the Rust builder is a
# SAM beta feature). Needs no AWS account and no network beyond PyPI and rustup.
#
# Usage: scripts/sam-build.sh            (then `sam deploy --guided`, see README "Deploy")
# Output: .aws-sam/build/{ApiFunction,ScheduledFunction,InboxFunction}/bootstrap (arm64, stripped)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv-deploy"
PYTHON="${PYTHON:-python3}"
REQUIREMENTS=("aws-sam-cli==1.170.0" "cargo-lambda==1.9.2" "ziglang==0.17.1")
STAMP="$VENV/.tuneplane-requirements"
WANT="$(printf '%s\n' "${REQUIREMENTS[@]}")"

if [[ ! -x "$VENV/bin/python" || ! -f "$STAMP" || "$(cat "$STAMP")" != "$WANT" ]]; then
  echo "sam-build: installing ${REQUIREMENTS[*]} into $VENV" >&2
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${REQUIREMENTS[@]}"
  printf '%s\n' "$WANT" >"$STAMP"
fi

if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
  echo "sam-build: rustup target add aarch64-unknown-linux-gnu" >&2
  rustup target add aarch64-unknown-linux-gnu
fi

# sam finds `cargo lambda` and cargo-lambda finds zig (python -m ziglang) through PATH.
export PATH="$VENV/bin:$PATH"
export SAM_CLI_TELEMETRY=0
start=$(date +%s)
sam build --beta-features "$@"
echo "sam-build: built in $(($(date +%s) - start)) s" >&2
for f in .aws-sam/build/*/bootstrap; do
  kind=$(command -v file >/dev/null && file -b "$f" | cut -d, -f1-2 || echo "")
  printf "%-45s %6s  %s\n" "$f" "$(du -h "$f" | cut -f1)" "$kind"
done
