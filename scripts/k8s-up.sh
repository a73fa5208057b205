#!/usr/bin/env bash
# Brings up a real Kubernetes control plane on 127.0.0.1 for TunePlane: etcd, kube-apiserver (RBAC,
# service-account token signing, locally generated certificates), kube-controller-manager,
# kube-scheduler, the KubeRay CRDs and operator, and the fleet file's nodes played by `kubesim agent`
# (nvidia.com/gpu capacity, tuneplane/gpu-series labels, cordons).
#
#   scripts/k8s-up.sh [--fleet FILE | --no-fleet] [--simulate] [--no-netpol] [--dir DIR] [--port PORT]
#
# The agent runs the pods for real (needs root): each pod a network namespace with its own IP, its
# containers processes with the runtime testenv/images.yaml gives their image (pinned virtualenvs,
# Ray among them, built once per machine by scripts/testenv-runtimes.sh); an image the map does not
# know fails to pull. Pods trust the cluster's test CA, which also signs blob-store.crt for the dev
# stack's HTTPS blob endpoint (`tuneplane dev --blob-tls-cert`). --simulate pretends instead: pods meant to end run 3 s and exit 0, and the
# bad-image example's image cannot be pulled. TUNEPLANE_K8S_AGENT_ARGS replaces the agent's options
# (see `kubesim agent --help`). TUNEPLANE_K8S_AGENT_BIN runs a prebuilt node agent instead of building
# the debug one; TUNEPLANE_K8S_KCM_ARGS adds options to kube-controller-manager (e.g. its API QPS),
# TUNEPLANE_K8S_SCHEDULER_ARGS to kube-scheduler (e.g. --kube-api-qps, its binding rate),
# TUNEPLANE_K8S_KUBERAY_ARGS to the KubeRay operator (e.g. --reconcile-concurrency),
# TUNEPLANE_K8S_KUBERAY_DIR runs another KubeRay build (its bin/kuberay-operator and crds/), and
# NetworkPolicies are enforced on the real pods as a cluster's network plugin would: kube-router's
# firewall controller (scripts/testenv-enforcer.sh; iptables + ipset on the pod bridge, needs root
# and the Debian packages iptables and ipset) runs beside the agent; --no-netpol (or --simulate)
# leaves it out. TUNEPLANE_K8S_AUDIT_USERS (comma-separated) names further users the audit log records beside the
# reconciler's ServiceAccount (the Kueue comparison audits both controllers alike).
# Components are built once per machine from the Go modules pinned in testenv/ (scripts/testenv-build.sh).
# State, logs and kubeconfigs go to DIR (default .tuneplane-k8s/ in the checkout). Prints the admin
# kubeconfig's path last. scripts/k8s-down.sh stops everything. Running it again restarts the cluster
# from a clean state.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${TUNEPLANE_K8S_DIR:-$ROOT/.tuneplane-k8s}"
PORT="${TUNEPLANE_K8S_PORT:-6443}"
FLEET="$ROOT/examples/fleet.yaml"
SIMULATE=""
NO_NETPOL=""
while (($#)); do
  case "$1" in
    --simulate) SIMULATE=1; shift ;;
    --no-netpol) NO_NETPOL=1; shift ;;
    --fleet) FLEET="$2"; shift 2 ;;
    --no-fleet) FLEET=""; shift ;;
    --dir) DIR="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "k8s-up: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"

say() { printf '[k8s-up] %s\n' "$*" >&2; }
die() { printf '[k8s-up] error: %s\n' "$*" >&2; exit 1; }
# The last lines of a component's log, for an error message.
tail_log() { [[ -f "$DIR/logs/$1.log" ]] && tail -n 25 "$DIR/logs/$1.log" | sed 's/^/    /' >&2 || true; }

command -v openssl >/dev/null 2>&1 || die "openssl is needed to generate the cluster's certificates (apt-get install openssl)"
command -v curl >/dev/null 2>&1 || die "curl is needed to probe the components (apt-get install curl)"
[[ -z "$FLEET" || -f "$FLEET" ]] || die "fleet file $FLEET does not exist"

# A previous cluster in the same folder is stopped and wiped: every bring-up starts clean.
"$ROOT/scripts/k8s-down.sh" --dir "$DIR" --quiet
rm -rf "$DIR/etcd" "$DIR/pki" "$DIR/logs" "$DIR/run"
mkdir -p "$DIR/pki" "$DIR/logs" "$DIR/run"

BIN="$("$ROOT/scripts/testenv-build.sh" | tail -n 1)"
CRDS="$(dirname "$BIN")/crds"
KUBERAY_BIN="$BIN/kuberay-operator"
# Another KubeRay build (bin/kuberay-operator and crds/ in one folder), e.g. the Kueue comparison's.
if [[ -n "${TUNEPLANE_K8S_KUBERAY_DIR:-}" ]]; then
  KUBERAY_BIN="$TUNEPLANE_K8S_KUBERAY_DIR/bin/kuberay-operator"
  CRDS="$TUNEPLANE_K8S_KUBERAY_DIR/crds"
  [[ -x "$KUBERAY_BIN" && -d "$CRDS" ]] || die "TUNEPLANE_K8S_KUBERAY_DIR=$TUNEPLANE_K8S_KUBERAY_DIR has no bin/kuberay-operator and crds/"
fi
say "binaries: $BIN (KubeRay operator: $KUBERAY_BIN)"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ETCD_PORT=$(free_port); ETCD_PEER=$(free_port); KUBELET_PORT=$(free_port)
if python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1',$PORT))!=0)"; then
  die "port $PORT on 127.0.0.1 is in use (another cluster? scripts/k8s-down.sh, or --port)"
fi

# --- certificates -------------------------------------------------------------------------------
PKI="$DIR/pki"
say "generating certificates in $PKI"
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=tuneplane-test-ca" \
  -keyout "$PKI/ca.key" -out "$PKI/ca.crt" 2>/dev/null
cert() { # name, subject, [subjectAltName]
  local name=$1 subj=$2 san=${3:-}
  openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$PKI/$name.key" -out "$PKI/$name.csr" 2>/dev/null
  local ext="$PKI/$name.ext"
  { echo "basicConstraints=CA:FALSE"; echo "keyUsage=digitalSignature,keyEncipherment"
    if [[ -n "$san" ]]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$san"
    else echo "extendedKeyUsage=clientAuth"; fi; } >"$ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$ext"
}
cert apiserver "/CN=kube-apiserver" \
  "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert admin "/O=system:masters/CN=tuneplane-admin"
cert controller-manager "/CN=system:kube-controller-manager"
cert scheduler "/CN=system:kube-scheduler"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert kuberay-operator "/O=system:masters/CN=kuberay-operator"
cert node-agent "/O=system:masters/CN=tuneplane-node-agent"
cert network-policy "/O=system:masters/CN=tuneplane-netpol-enforcer"
cert kubelet "/CN=tuneplane-fake-kubelet" "IP:127.0.0.1,DNS:localhost"
# The dev stack's HTTPS blob endpoint (tuneplane dev --blob-tls-cert): pods trust this CA.
cert blob-store "/CN=tuneplane-dev-blob-store" "IP:127.0.0.1,DNS:localhost"
openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null

kubeconfig() { # file, client cert name
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: tuneplane-test
  cluster:
    server: https://127.0.0.1:$PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$2.crt")
    client-key-data: $(base64 -w0 <"$PKI/$2.key")
contexts:
- name: tuneplane-test
  context: {cluster: tuneplane-test, user: $2}
current-context: tuneplane-test
KC
}
kubeconfig "$DIR/admin.kubeconfig" admin
kubeconfig "$DIR/run/controller-manager.kubeconfig" controller-manager
kubeconfig "$DIR/run/scheduler.kubeconfig" scheduler
kubeconfig "$DIR/run/kuberay-operator.kubeconfig" kuberay-operator
kubeconfig "$DIR/run/node-agent.kubeconfig" node-agent
kubeconfig "$DIR/run/network-policy.kubeconfig" network-policy

# --- processes ----------------------------------------------------------------------------------
start() { # name, command...
  local name=$1; shift
  setsid "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/run/$name.pid"
}
alive() { kill -0 "$(cat "$DIR/run/$1.pid")" 2>/dev/null; }
wait_until() { # name, seconds, probe command...
  local name=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ! alive "$name"; then say "$name exited; the end of its log ($DIR/logs/$name.log):"; tail_log "$name"; die "$name did not start"; fi
    if ((SECONDS > deadline)); then say "$name not ready after ${secs}s; the end of its log:"; tail_log "$name"; die "$name did not become ready"; fi
    sleep 0.5
  done
}

say "starting etcd on 127.0.0.1:$ETCD_PORT"
start etcd "$BIN/etcd" --name tuneplane --data-dir "$DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  --initial-cluster "tuneplane=http://127.0.0.1:$ETCD_PEER" --unsafe-no-fsync --log-level warn \
  --listen-metrics-urls ""
wait_until etcd 60 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

# Audit log of the reconciler's ServiceAccount (and of TUNEPLANE_K8S_AUDIT_USERS): which verbs on
# which resources it really uses (the real-cluster tests compare them with infra/kustomize's RBAC).
AUDIT_USERS='"system:serviceaccount:tuneplane-system:tuneplane-reconciler"'
IFS=',' read -r -a extra_users <<<"${TUNEPLANE_K8S_AUDIT_USERS:-}"
for u in "${extra_users[@]}"; do
  if [[ -n "$u" ]]; then AUDIT_USERS="$AUDIT_USERS, \"$u\""; fi
done
cat >"$DIR/run/audit-policy.yaml" <<AUDIT
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Metadata
    users: [$AUDIT_USERS]
  - level: None
AUDIT

say "starting kube-apiserver on https://127.0.0.1:$PORT"
start kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$PORT" \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
  --client-ca-file "$PKI/ca.crt" --authorization-mode RBAC \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
  --service-cluster-ip-range 10.96.0.0/16 --endpoint-reconciler-type none \
  --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$PKI/ca.crt" --kubelet-preferred-address-types InternalIP \
  --allow-privileged=true --event-ttl 1h --profiling=false \
  --audit-policy-file "$DIR/run/audit-policy.yaml" --audit-log-path "$DIR/logs/audit.log" \
  --audit-log-format json
ADMIN=(--cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key")
wait_until kube-apiserver 120 curl -sf "${ADMIN[@]}" "https://127.0.0.1:$PORT/readyz"

say "starting kube-controller-manager and kube-scheduler"
start kube-controller-manager "$BIN/kube-controller-manager" \
  --kubeconfig "$DIR/run/controller-manager.kubeconfig" --leader-elect=false \
  --bind-address 127.0.0.1 --secure-port 0 \
  --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
  --use-service-account-credentials=true \
  --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
  ${TUNEPLANE_K8S_KCM_ARGS:-}
start kube-scheduler "$BIN/kube-scheduler" \
  --kubeconfig "$DIR/run/scheduler.kubeconfig" --leader-elect=false --secure-port 0 \
  ${TUNEPLANE_K8S_SCHEDULER_ARGS:-}
# The controller manager is up when it has created the default namespace's service account.
wait_until kube-controller-manager 90 curl -sf "${ADMIN[@]}" \
  "https://127.0.0.1:$PORT/api/v1/namespaces/default/serviceaccounts/default"
sleep 1
alive kube-scheduler || { tail_log kube-scheduler; die "kube-scheduler exited"; }

say "installing the KubeRay CRDs"
for crd in "$CRDS"/*.yaml; do
  code=$(curl -s -o "$DIR/run/crd-answer.json" -w '%{http_code}' "${ADMIN[@]}" -X POST \
    -H 'Content-Type: application/yaml' --data-binary "@$crd" \
    "https://127.0.0.1:$PORT/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
  [[ $code == 201 || $code == 409 ]] || { cat "$DIR/run/crd-answer.json" >&2; die "installing $(basename "$crd") answered HTTP $code"; }
done
# The operator starts its controllers once discovery serves every ray.io kind.
wait_until kube-apiserver 60 bash -c "curl -sf ${ADMIN[*]} https://127.0.0.1:$PORT/apis/ray.io/v1 | grep -q '\"rayjobs\"' && curl -sf ${ADMIN[*]} https://127.0.0.1:$PORT/apis/ray.io/v1 | grep -q '\"rayservices\"' && curl -sf ${ADMIN[*]} https://127.0.0.1:$PORT/apis/ray.io/v1 | grep -q '\"rayclusters\"'"

say "starting the KubeRay operator (--use-kubernetes-proxy)"
KUBECONFIG="$DIR/run/kuberay-operator.kubeconfig" start kuberay-operator "$KUBERAY_BIN" \
  --use-kubernetes-proxy --enable-leader-election=false --metrics-addr 0 --health-probe-bind-address 0 \
  --log-stdout-encoder console ${TUNEPLANE_K8S_KUBERAY_ARGS:-}
sleep 2
alive kuberay-operator || { tail_log kuberay-operator; die "the KubeRay operator exited"; }

if [[ -n "$FLEET" ]]; then
  AGENT="${TUNEPLANE_K8S_AGENT_BIN:-}"
  if [[ -z "$AGENT" ]]; then
    say "building the node agent (cargo build --workspace --bin kubesim)"
    cargo build --quiet --locked --workspace --bin kubesim --manifest-path "$ROOT/Cargo.toml" \
      || die "cargo build of the node agent failed"
    AGENT="${CARGO_TARGET_DIR:-$ROOT/target}/debug/kubesim"
  fi
  [[ -x "$AGENT" ]] || die "the node agent $AGENT is not an executable (TUNEPLANE_K8S_AGENT_BIN)"
  if [[ -n "$SIMULATE" ]]; then
    MODE_ARGS="--simulate --pod-seconds 3 --fail-image registry.invalid/tuneplane/does-not-exist:0.0"
  else
    [[ $(id -u) -eq 0 ]] || die "the node agent runs pods for real, which needs root (network namespaces, mounts); run as root or pass --simulate"
    command -v ip >/dev/null 2>&1 || die "the node agent needs ip (apt-get install iproute2), or pass --simulate"
    TUNEPLANE_RUNTIMES="$("$ROOT/scripts/testenv-runtimes.sh" | tail -n 1)"
    export TUNEPLANE_RUNTIMES
    MODE_ARGS="--images $ROOT/testenv/images.yaml --data-dir $DIR/node-agent --trust-ca $PKI/ca.crt"
  fi
  say "starting the fleet's nodes from $FLEET${SIMULATE:+ (simulated pods)}"
  start node-agent "$AGENT" agent --kubeconfig "$DIR/run/node-agent.kubeconfig" \
    --fleet "$FLEET" --kubelet-port "$KUBELET_PORT" \
    --tls-cert "$PKI/kubelet.crt" --tls-key "$PKI/kubelet.key" --ready-file "$DIR/run/nodes-ready" \
    ${TUNEPLANE_K8S_AGENT_ARGS:-$MODE_ARGS}
  wait_until node-agent 60 test -f "$DIR/run/nodes-ready"
fi

# --- NetworkPolicy enforcement on the real pods -------------------------------------------------
# kube-router treats as its own the pods whose hostIP is its node's address; every node the agent
# plays has InternalIP 127.0.0.1, so one process enforces for all of them. It reads its node once,
# at start: without a fleet (the test suite brings its own nodes and deletes them between
# scenarios) a stand-in node is made for that moment and deleted again.
if [[ -z "$SIMULATE" && -z "$NO_NETPOL" && $(id -u) -eq 0 ]]; then
  # A fresh Debian machine lacks both: install them as scripts/test.sh does (this branch runs as root).
  if ! command -v iptables >/dev/null 2>&1 || ! command -v ipset >/dev/null 2>&1; then
    say "installing iptables and ipset (Debian packages; the NetworkPolicy enforcer programs them)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables ipset >/dev/null; } \
      || die "enforcing NetworkPolicies needs iptables and ipset and apt-get could not install them (apt-get install iptables ipset), or pass --no-netpol"
  fi
  ENFORCER="$("$ROOT/scripts/testenv-enforcer.sh" | tail -n 1)"
  # Bridged pod traffic must pass iptables for the firewall to see it.
  modprobe br_netfilter 2>/dev/null || true
  sysctl -qw net.bridge.bridge-nf-call-iptables=1 \
    || die "net.bridge.bridge-nf-call-iptables cannot be set (the br_netfilter module is missing); pass --no-netpol"
  NODE="tuneplane-netpol-host"
  if [[ -n "$FLEET" ]]; then
    NODE=$(curl -sf "${ADMIN[@]}" "https://127.0.0.1:$PORT/api/v1/nodes" \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["items"][0]["metadata"]["name"])')
  else
    code=$(curl -s -o "$DIR/run/node-answer.json" -w '%{http_code}' "${ADMIN[@]}" -X POST \
      -H 'Content-Type: application/json' "https://127.0.0.1:$PORT/api/v1/nodes" --data-binary \
      "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$NODE\"},\"spec\":{\"unschedulable\":true,\"taints\":[{\"key\":\"tuneplane.io/stand-in\",\"effect\":\"NoSchedule\"}]}}")
    [[ $code == 201 ]] || { cat "$DIR/run/node-answer.json" >&2; die "making the enforcer's stand-in node answered HTTP $code"; }
    curl -sf -o /dev/null "${ADMIN[@]}" -X PATCH -H 'Content-Type: application/merge-patch+json' \
      "https://127.0.0.1:$PORT/api/v1/nodes/$NODE/status" \
      --data-binary '{"status":{"addresses":[{"type":"InternalIP","address":"127.0.0.1"}]}}' \
      || die "setting the stand-in node's address failed"
  fi
  # One enforcer per machine: two would rewrite each other's chains in the host's iptables, and
  # chains an enforcer left when it stopped would pass for this one's (it would then be waited
  # for while it fails, and stale rules would drop the new pods' traffic).
  others=$(pgrep -f -- '--run-firewall=true' || true)
  [[ -z "$others" ]] || die "another NetworkPolicy enforcer runs (pid $(echo $others)): another cluster is up; stop it with scripts/k8s-down.sh --dir ITS_DIR, or pass --no-netpol"
  pat='KUBE-ROUTER-(INPUT|FORWARD|OUTPUT)|KUBE-NWPLCY-|KUBE-POD-FW-'
  if iptables-save -t filter 2>/dev/null | grep -Eq -- "$pat"; then
    iptables-save -t filter | grep -Ev -- "^:($pat)|^-A ($pat)|-j ($pat)" | iptables-restore || true
  fi
  ipset list -n 2>/dev/null | grep -E '^KUBE-(SRC|DST)-' | xargs -r -n1 ipset destroy 2>/dev/null || true
  say "enforcing NetworkPolicies on the pods (kube-router firewall, node $NODE)"
  start network-policy "$ENFORCER" --kubeconfig "$DIR/run/network-policy.kubeconfig" \
    --hostname-override "$NODE" --run-firewall=true --run-router=false --run-service-proxy=false \
    --health-port 0 --metrics-port 0 --service-cluster-ip-range 10.96.0.0/16 -v 1
  wait_until network-policy 60 bash -c "iptables -S KUBE-ROUTER-FORWARD >/dev/null 2>&1"
  alive network-policy || die "the NetworkPolicy enforcer stopped at start: see $DIR/logs/network-policy.log"
  if [[ -z "$FLEET" ]]; then
    curl -sf -o /dev/null "${ADMIN[@]}" -X DELETE "https://127.0.0.1:$PORT/api/v1/nodes/$NODE" \
      || die "deleting the enforcer's stand-in node failed"
  fi
  echo "$ENFORCER" >"$DIR/run/network-policy.bin"
fi

cat >"$DIR/env" <<ENV
export KUBECONFIG=$DIR/admin.kubeconfig
ENV
say "control plane up: kube-apiserver https://127.0.0.1:$PORT, logs in $DIR/logs"
say "try: kubectl --kubeconfig $DIR/admin.kubeconfig get nodes -L tuneplane/gpu-series"
[[ -n "$FLEET" && -z "$SIMULATE" ]] && say "capsules over HTTPS (pods trust $PKI/ca.crt): tuneplane dev --kubeconfig $DIR/admin.kubeconfig --blob-tls-cert $PKI/blob-store.crt --blob-tls-key $PKI/blob-store.key"
echo "$DIR/admin.kubeconfig"
