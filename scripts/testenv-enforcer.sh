#!/usr/bin/env bash
# Builds the real tier's NetworkPolicy enforcer (testenv/enforcer: kube-router's command, of which
# only the network-policy controller is run: iptables + ipset on the pod bridge) once per machine,
# cached in ~/.cache/tuneplane-testenv; prints the binary's path on the last line.
#
# Why kube-router and not sigs.k8s.io/kube-network-policies: the latter hands every pod packet to
# userspace with the nftables `queue` expression, which this kernel lacks (CONFIG_NFT_QUEUE unset:
# `nft add rule ... queue num 100 bypass` fails with "Could not process rule: No such file or
# directory"). kube-router's controller needs only xt matches (physdev, set, conntrack, addrtype,
# comment, mark) and ipset, all built in.
#
# Running it needs root, the Debian packages iptables and ipset, net.bridge.bridge-nf-call-iptables=1,
# and only --run-firewall (its router and service proxy, where v2.1.0's advisories GHSA-v5mh-h5hx-7v92
# and GHSA-phqm-jgc3-qf8g lie, stay off):
#   kube-router --kubeconfig K --hostname-override <a fleet node> --run-firewall=true \
#     --run-router=false --run-service-proxy=false --health-port 0 --metrics-port 0 \
#     --service-cluster-ip-range 10.96.0.0/16
# Every node the agent plays has InternalIP 127.0.0.1 and every pod status.hostIP 127.0.0.1, so one
# process treats all of the host's pods as local (start it once the agent's nodes exist).
# Its rules outlive the process, and v2.1.0's --cleanup-config panics (in the service proxy's
# cleanup) without removing them; tear down by hand after stopping it:
#   pat='KUBE-ROUTER-(INPUT|FORWARD|OUTPUT)|KUBE-NWPLCY-|KUBE-POD-FW-'
#   iptables-save -t filter | grep -Ev -- "^:($pat)|^-A ($pat)|-j ($pat)" | iptables-restore
#   ipset list -n | grep -E '^KUBE-(SRC|DST)-' | xargs -r -n1 ipset destroy
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/testenv-lib.sh"

require_go "the NetworkPolicy enforcer is built from Go modules (go 1.24 or newer)"
VERSION=$(module_version enforcer github.com/cloudnativelabs/kube-router/v2)
OUT="$CACHE/kube-router_${VERSION#v}"
mkdir -p "$OUT"
if [[ ! -x "$OUT/kube-router" ]]; then
  say "building kube-router $VERSION (first run on this machine; cached in $OUT)"
  go_build enforcer github.com/cloudnativelabs/kube-router/v2/cmd/kube-router "$OUT/kube-router" \
    "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$VERSION"
fi
echo "$OUT/kube-router"
