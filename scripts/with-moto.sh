#!/usr/bin/env bash
# Runs a command with a private moto_server (local S3 + DynamoDB) on 127.0.0.1, then stops it.
#
# Usage: scripts/with-moto.sh CMD [ARGS...]
#   e.g. scripts/with-moto.sh cargo test -p tuneplane-stores
#
# The server listens on a random free port; CMD sees AWS_ENDPOINT_URL=http://127.0.0.1:PORT,
# AWS_REGION, dummy AWS credentials and AWS_EC2_METADATA_DISABLED=true (so an SDK never probes the
# instance metadata address). moto is stopped when CMD ends, fails or is interrupted, and the
# script exits with CMD's status. Set MOTO_LOG=path to keep the server's log.
set -euo pipefail

if [[ $# -eq 0 ]]; then
  echo "usage: $0 CMD [ARGS...]" >&2
  exit 2
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/bootstrap-venv.sh"
PY="$ROOT/.venv/bin/python"
# moto's server, one backend call at a time (transactions isolated as in DynamoDB).
LOG="${MOTO_LOG:-$(mktemp -t tuneplane-moto.XXXXXX)}"
MOTO_PID=""

stop_moto() {
  if [[ -n "$MOTO_PID" ]] && kill -0 "$MOTO_PID" 2>/dev/null; then
    kill "$MOTO_PID" 2>/dev/null || true
    wait "$MOTO_PID" 2>/dev/null || true
  fi
  MOTO_PID=""
  [[ -n "${MOTO_LOG:-}" ]] || rm -f "$LOG"
}
trap stop_moto EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Polls until moto answers; fails if the process died.
wait_ready() {
  local port="$1"
  for _ in $(seq 1 150); do
    kill -0 "$MOTO_PID" 2>/dev/null || return 1
    if "$PY" -c 'import sys, urllib.request
urllib.request.urlopen("http://127.0.0.1:%s/moto-api/data.json" % sys.argv[1], timeout=1)' "$port" 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  return 1
}

# A chosen port can be taken before moto binds it: try a few.
for attempt in 1 2 3; do
  PORT="$(free_port)"
  "$PY" "$ROOT/scripts/moto-serial.py" 127.0.0.1 "$PORT" >"$LOG" 2>&1 &
  MOTO_PID=$!
  if wait_ready "$PORT"; then
    break
  fi
  echo "with-moto: moto_server did not start on port $PORT (attempt $attempt):" >&2
  tail -n 20 "$LOG" >&2 || true
  stop_moto
  if [[ "$attempt" == 3 ]]; then
    exit 1
  fi
done

export AWS_ENDPOINT_URL="http://127.0.0.1:$PORT"
export AWS_REGION="us-east-1" AWS_DEFAULT_REGION="us-east-1"
export AWS_ACCESS_KEY_ID="testing" AWS_SECRET_ACCESS_KEY="testing"
export AWS_EC2_METADATA_DISABLED="true"
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL_S3 AWS_ENDPOINT_URL_DYNAMODB
echo "with-moto: moto_server on $AWS_ENDPOINT_URL (pid $MOTO_PID)" >&2

set +e
"$@"
status=$?
set -e
exit "$status"
