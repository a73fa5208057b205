#!/usr/bin/env bash
# Creates the repository's Python virtualenv (.venv/, git-ignored) with the pinned tools the tests
# need, e.g. moto_server as the local S3 + DynamoDB endpoint. Idempotent: when .venv already holds
# exactly the pinned list it returns at once. Needs python3 (3.9+) with the venv module and PyPI.
#
# Usage: scripts/bootstrap-venv.sh        (PYTHON=/path/to/python3 to choose the interpreter)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON="${PYTHON:-python3}"

# ---- Pinned Python requirements: one per line; keep versions exact. ------------------------------
# Local AWS endpoint for the store tests (moto_server needs flask and flask-cors).
REQUIREMENTS=(
  "moto[s3,dynamodb]==5.2.1"
  "flask==3.1.3"
  "flask-cors==6.0.2"
  # Template checks: cfn-lint on template.yaml and on its offline SAM transform.
  "cfn-lint==1.58.0"
  "aws-sam-translator==1.115.0"
  # The Lambda Runtime API emulator (`cargo lambda watch --only-lambda-apis`) for the functions'
  # runtime-loop tests; a prebuilt binary in a wheel, no compilation.
  "cargo-lambda==1.9.2"
)
# --------------------------------------------------------------------------------------------------

STAMP="$VENV/.tuneplane-requirements"
WANT="$(printf '%s\n' "${REQUIREMENTS[@]}")"

if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "bootstrap-venv: creating $VENV" >&2
  if ! "$PYTHON" -m venv "$VENV"; then
    rm -rf "$VENV"
    echo "bootstrap-venv: '$PYTHON -m venv' failed; on Debian/Ubuntu install it with" >&2
    echo "  apt-get install -y python3-venv   (or set PYTHON=/path/to/python3)" >&2
    exit 1
  fi
fi
echo "bootstrap-venv: installing ${#REQUIREMENTS[@]} pinned packages into $VENV" >&2
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${REQUIREMENTS[@]}"
# Written last, so an interrupted install is retried next time.
printf '%s\n' "$WANT" > "$STAMP"
