package auth

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
		// As Kubernetes' authorizer since 1.34: its own Node alone.
		{"get another node", node("get", "", "web-2"), DecisionNoOpinion},
		{"list nodes", node("list", "", ""), DecisionNoOpinion},
		{"watch nodes", node("watch", "", ""), DecisionNoOpinion},
		{"list its own node by name", node("list", "", "web-1"), DecisionAllow},
		{"watch its own node by name", node("watch", "", "web-1"), DecisionAllow},
		{"create a node (name checked by admission)", node("create", "", ""), DecisionAllow},
		{"update own node", node("update", "", "web-1"), DecisionAllow},
		{"patch own node status", node("patch", "status", "web-1"), DecisionAllow},
		{"get own node status (kube allows only writes there)", node("get", "status", "web-1"), DecisionNoOpinion},
		// Any name, as in Kubernetes: AdmitNode refuses another node's.
		{"update another node", node("update", "", "web-2"), DecisionAllow},
		{"update another node's status", node("update", "status", "web-2"), DecisionAllow},
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

func TestAdmitNodeObject(t *testing.T) {
	web1 := Attributes{User: NodeUser("web-1"), Verb: "update", ResourceRequest: true, Resource: "nodes", Name: "web-1"}
	node := func(labels map[string]string, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	dedicated := corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}
	stored := node(map[string]string{"kubernetes.io/hostname": "web-1", "node-role.kubernetes.io/db": "", "rack": "r1"}, dedicated)
	tests := []struct {
		name     string
		a        Attributes
		obj, old *corev1.Node
		wantErr  string
	}{
		{"register with kubelet labels and taints", web1, node(map[string]string{
			"kubernetes.io/hostname": "web-1", "topology.kubernetes.io/zone": "z", "node.kubernetes.io/pool": "a",
			"kubelet.kubernetes.io/x": "y", "example.com/rack": "r1", "plain": "v"}, dedicated), nil, ""},
		{"register with a role and a restricted label", web1, node(map[string]string{"node-role.kubernetes.io/db": "", "node-restriction.kubernetes.io/secure": "true"}), nil,
			`node "web-1" is not allowed to set the following labels: node-restriction.kubernetes.io/secure, node-role.kubernetes.io/db`},
		{"register with a k8s.io label", web1, node(map[string]string{"x.k8s.io/y": "z"}), nil, "x.k8s.io/y"},
		{"a restricted label under a subdomain", web1, node(map[string]string{"a.node-restriction.kubernetes.io/b": "c"}), nil, "a.node-restriction.kubernetes.io/b"},
		{"status post keeping an administrator's labels", web1, stored.DeepCopy(), stored, ""},
		{"change own labels", web1, node(map[string]string{"kubernetes.io/hostname": "web-1", "node-role.kubernetes.io/db": "", "rack": "r2", "topology.kubernetes.io/zone": "z"}, dedicated), stored, ""},
		{"remove a role", web1, node(map[string]string{"kubernetes.io/hostname": "web-1", "rack": "r1"}, dedicated), stored,
			"is not allowed to modify labels: node-role.kubernetes.io/db"},
		{"change a role", web1, node(map[string]string{"kubernetes.io/hostname": "web-1", "node-role.kubernetes.io/db": "x", "rack": "r1"}, dedicated), stored,
			"is not allowed to modify labels: node-role.kubernetes.io/db"},
		{"remove a taint", web1, node(stored.Labels), stored, `node "web-1" is not allowed to modify taints`},
		{"add a taint", web1, node(stored.Labels, dedicated, corev1.Taint{Key: "k", Effect: corev1.TaintEffectNoExecute}), stored, "not allowed to modify taints"},
		{"an administrator may", Attributes{User: &User{Name: "admin", Groups: []string{GroupMasters}}, Verb: "update", ResourceRequest: true, Resource: "nodes"},
			node(map[string]string{"node-restriction.kubernetes.io/secure": "true"}), stored, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := AdmitNodeObject(tt.a, tt.obj, tt.old)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("got %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("got %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}
