// Command netpol-eval answers, for the test tier, whether NetworkPolicies allow traffic, using
// cyclonus's policy matcher (an evaluator independent of TunePlane's code). Input on stdin:
//
//	{"policies": [<networking.k8s.io/v1 NetworkPolicy>...],
//	 "cases": [{"name": "...", "port": 8265, "protocol": "TCP",
//	            "source": {"namespace": "ns", "namespace_labels": {...}, "pod_labels": {...}, "ip": "..."},
//	            "destination": {...}}]}
//
// A peer without a namespace is outside the cluster (only its IP counts). Output on stdout:
// [{"name": "...", "allowed": true|false}...] in the order of the cases.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

type peer struct {
	Namespace       string            `json:"namespace"`
	NamespaceLabels map[string]string `json:"namespace_labels"`
	PodLabels       map[string]string `json:"pod_labels"`
	IP              string            `json:"ip"`
}

type trafficCase struct {
	Name        string `json:"name"`
	Port        int    `json:"port"`
	PortName    string `json:"port_name"`
	Protocol    string `json:"protocol"`
	Source      peer   `json:"source"`
	Destination peer   `json:"destination"`
}

type input struct {
	Policies []*networkingv1.NetworkPolicy `json:"policies"`
	Cases    []trafficCase                 `json:"cases"`
}

type verdict struct {
	Name    string `json:"name"`
	Allowed bool   `json:"allowed"`
}

func trafficPeer(p peer) *matcher.TrafficPeer {
	out := &matcher.TrafficPeer{IP: p.IP}
	if p.Namespace != "" {
		labels := p.NamespaceLabels
		if labels == nil {
			labels = map[string]string{}
		}
		// The API server labels every namespace with its own name.
		labels["kubernetes.io/metadata.name"] = p.Namespace
		out.Internal = &matcher.InternalPeer{
			Namespace:       p.Namespace,
			NamespaceLabels: labels,
			PodLabels:       p.PodLabels,
		}
	}
	return out
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintf(os.Stderr, "netpol-eval: reading the input: %v\n", err)
		os.Exit(2)
	}
	policy := matcher.BuildNetworkPolicies(false, in.Policies)
	out := make([]verdict, 0, len(in.Cases))
	for _, c := range in.Cases {
		protocol := v1.Protocol(c.Protocol)
		if protocol == "" {
			protocol = v1.ProtocolTCP
		}
		result := policy.IsTrafficAllowed(&matcher.Traffic{
			Source:           trafficPeer(c.Source),
			Destination:      trafficPeer(c.Destination),
			ResolvedPort:     c.Port,
			ResolvedPortName: c.PortName,
			Protocol:         protocol,
		})
		out = append(out, verdict{Name: c.Name, Allowed: result.IsAllowed()})
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "netpol-eval: writing the verdicts: %v\n", err)
		os.Exit(2)
	}
}
