package auth

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeAuthorizer(t *testing.T) {
	web1 := NodeUser("web-1")
	lease := func(verb, ns, name string) Attributes {
		return Attributes{User: web1, Verb: verb, ResourceRequest: true, APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: ns, Name: name}
	}
	node := func(verb, sub, name string) Attributes {
		return Attributes{User: web1, Verb: verb, ResourceRequest: true, Resource: "nodes", Subresource: sub, Name: name}
	}
	tests := []struct {
		name string
		a    Attributes
		want Decision
	}{
		{"get own node", node("get", "", "web-1"), DecisionAllow},
		{"get another node", node("get", "", "web-2"), DecisionAllow},
		{"list nodes", node("list", "", ""), DecisionAllow},
		{"watch nodes", node("watch", "", ""), DecisionAllow},
		{"create a node (name checked by admission)", node("create", "", ""), DecisionAllow},
		{"update own node", node("update", "", "web-1"), DecisionAllow},
		{"patch own node status", node("patch", "status", "web-1"), DecisionAllow},
		{"update another node", node("update", "", "web-2"), DecisionNoOpinion},
		{"update another node's status", node("update", "status", "web-2"), DecisionNoOpinion},
		{"delete own node", node("delete", "", "web-1"), DecisionNoOpinion},
		{"get own lease", lease("get", "kube-node-lease", "web-1"), DecisionAllow},
		{"update own lease", lease("update", "kube-node-lease", "web-1"), DecisionAllow},
		{"delete own lease", lease("delete", "kube-node-lease", "web-1"), DecisionAllow},
		{"create a lease", lease("create", "kube-node-lease", ""), DecisionAllow},
		{"update another node's lease", lease("update", "kube-node-lease", "web-2"), DecisionNoOpinion},
		{"list node leases", lease("list", "kube-node-lease", ""), DecisionNoOpinion},
		{"lease elsewhere", lease("get", "default", "web-1"), DecisionNoOpinion},
		{"create events", Attributes{User: web1, Verb: "create", ResourceRequest: true, APIGroup: "events.k8s.io", Resource: "events", Namespace: "default"}, DecisionAllow},
		{"list namespaces", Attributes{User: web1, Verb: "list", ResourceRequest: true, Resource: "namespaces"}, DecisionNoOpinion},
		{"not a node", Attributes{User: &User{Name: "system:node:web-1"}, Verb: "get", ResourceRequest: true, Resource: "nodes", Name: "web-1"}, DecisionNoOpinion},
		{"node group without node name", Attributes{User: &User{Name: "web-1", Groups: []string{GroupNodes}}, Verb: "get", ResourceRequest: true, Resource: "nodes"}, DecisionNoOpinion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, reason, err := NodeAuthorizer{}.Authorize(context.Background(), tt.a)
			if err != nil || d != tt.want {
				t.Errorf("got %v (%q, %v), want %v", d, reason, err, tt.want)
			}
		})
	}
}

func TestAdmitNode(t *testing.T) {
	web1 := NodeUser("web-1")
	own := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "web-1", UID: "u1"}}
	tests := []struct {
		name    string
		a       Attributes
		obj     string
		owners  []metav1.OwnerReference
		wantErr bool
	}{
		{"create own node", Attributes{User: web1, Verb: "create", ResourceRequest: true, Resource: "nodes"}, "web-1", nil, false},
		{"create another node", Attributes{User: web1, Verb: "create", ResourceRequest: true, Resource: "nodes"}, "web-2", nil, true},
		{"create own lease owned by own node", Attributes{User: web1, Verb: "create", ResourceRequest: true, APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease"}, "web-1", own, false},
		{"create another node's lease", Attributes{User: web1, Verb: "create", ResourceRequest: true, APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease"}, "web-2", nil, true},
		{"lease owned by another node", Attributes{User: web1, Verb: "update", ResourceRequest: true, APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", Name: "web-1"}, "web-1",
			[]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "web-2"}}, true},
		{"lease owned by something else", Attributes{User: web1, Verb: "patch", ResourceRequest: true, APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", Name: "web-1"}, "web-1",
			[]metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: "web-1"}}, true},
		{"lease outside kube-node-lease", Attributes{User: web1, Verb: "create", ResourceRequest: true, APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "default"}, "web-1", nil, true},
		{"delete another node's lease", Attributes{User: web1, Verb: "delete", ResourceRequest: true, APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", Name: "web-2"}, "web-2", nil, true},
		{"other users are not restricted", Attributes{User: &User{Name: "alice"}, Verb: "create", ResourceRequest: true, Resource: "nodes"}, "web-2", nil, false},
		{"other kinds are not restricted", Attributes{User: web1, Verb: "create", ResourceRequest: true, Resource: "events", Namespace: "default"}, "x", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := AdmitNode(tt.a, tt.obj, tt.owners)
			if (err != nil) != tt.wantErr {
				t.Errorf("got %v, want error %v", err, tt.wantErr)
			}
		})
	}
}
