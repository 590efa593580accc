package apiserver_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"encoding/pem"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	apiserverconfig "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/auth/audit"
	"github.com/leasehold/leasehold/internal/pki"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

const (
	aliceToken = "alice-token"
	web1Token  = "web-1-token"
	web2Token  = "web-2-token"
)

func authUsers() map[string]*auth.User {
	return map[string]*auth.User{
		aliceToken: {Name: "alice", Groups: []string{"devs", auth.GroupAuthenticated}},
		web1Token:  auth.NodeUser("web-1"),
		web2Token:  auth.NodeUser("web-2"),
	}
}

func clientFor(t *testing.T, s *apiservertest.Server, token string) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(s.ConfigFor(token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// eventuallyAuth polls check until it succeeds or the deadline passes: RBAC
// reads bindings from the watch cache, a moment behind writes.
func eventuallyAuth(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRBACForbiddenThenAllowed(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Users: authUsers()})
	ctx := context.Background()
	admin := s.Client(t, "")
	alice := clientFor(t, s, aliceToken)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := alice.CoordinationV1().Leases("team-a").Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "team-a"}}, metav1.UpdateOptions{})
	want := `leases.coordination.k8s.io "x" is forbidden: User "alice" cannot update resource "leases" in API group "coordination.k8s.io" in the namespace "team-a"`
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	_, err = alice.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	want = `nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}

	if _, err := admin.RbacV1().Roles("team-a").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "lease-writer"},
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch", "create", "update"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb, err := admin.RbacV1().RoleBindings("team-a").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-writes"},
		RoleRef:    rbacv1.RoleRef{Kind: "Role", Name: "lease-writer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rb.RoleRef.APIGroup != rbacv1.GroupName || rb.Subjects[0].APIGroup != rbacv1.GroupName {
		t.Errorf("binding not defaulted: %+v", rb)
	}
	eventuallyAuth(t, "alice creates a lease after the binding", func() error {
		_, err := alice.CoordinationV1().Leases("team-a").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		return err
	})
	if err := alice.CoordinationV1().Leases("team-a").Delete(ctx, "x", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("delete without the verb: got %v, want Forbidden", err)
	}
	if _, err := alice.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list in another namespace: got %v, want Forbidden", err)
	}
	// roleRef may not change.
	rb.RoleRef.Name = "cluster-admin"
	rb.RoleRef.Kind = "ClusterRole"
	if _, err := admin.RbacV1().RoleBindings("team-a").Update(ctx, rb, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("changing roleRef: got %v, want Invalid", err)
	}
}

func TestNodeRestriction(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Users: authUsers()})
	ctx := context.Background()
	web1, web2 := clientFor(t, s, web1Token), clientFor(t, s, web2Token)
	for _, c := range []struct {
		client kubernetes.Interface
		name   string
	}{{web1, "web-1"}, {web2, "web-2"}} {
		n, err := c.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s creating its node: %v", c.name, err)
		}
		_, err = c.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: c.name, OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: c.name, UID: n.UID}}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(c.name), LeaseDurationSeconds: ptr.To[int32](40)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s creating its lease: %v", c.name, err)
		}
	}
	leases := web1.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	own, err := leases.Get(ctx, "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := leases.Update(ctx, own, metav1.UpdateOptions{}); err != nil {
		t.Errorf("renewing its own lease: %v", err)
	}
	// As Kubernetes' node authorizer since 1.34: its own Node, selected by
	// name, and not its peers'.
	if _, err := web1.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing all nodes: %v, want Forbidden", err)
	}
	if nodes, err := web1.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=web-1"}); err != nil || len(nodes.Items) != 1 {
		t.Errorf("listing its own node: %v", err)
	}
	// Labels a kubelet may set it may change; an administrator's it keeps.
	if _, err := s.Client(t, "").CoreV1().Nodes().Patch(ctx, "web-1", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/db":""}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := web1.CoreV1().Nodes().Patch(ctx, "web-1", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"topology.kubernetes.io/zone":"z1","rack":"r1"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("web-1 setting its zone and rack: %v", err)
	}
	if _, err := web1.CoreV1().Nodes().Patch(ctx, "web-1", "application/merge-patch+json", []byte(`{"status":{"conditions":[{"type":"Ready","status":"True"}]}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("web-1 posting its status: %v", err)
	}

	forbidden := []struct {
		name string
		do   func() error
	}{
		{"update another node's lease", func() error {
			_, err := leases.Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "web-2"}}, metav1.UpdateOptions{})
			return err
		}},
		{"patch another node's lease", func() error {
			_, err := leases.Patch(ctx, "web-2", "application/merge-patch+json", []byte(`{"spec":{"holderIdentity":"web-1"}}`), metav1.PatchOptions{})
			return err
		}},
		{"delete another node's lease", func() error { return leases.Delete(ctx, "web-2", metav1.DeleteOptions{}) }},
		{"create a lease named for another node", func() error {
			_, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "web-3"}}, metav1.CreateOptions{})
			return err
		}},
		{"own the lease by another node", func() error {
			l, err := leases.Get(ctx, "web-1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "web-2", UID: "x"}}
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
			return err
		}},
		{"update another node", func() error {
			_, err := web1.CoreV1().Nodes().Patch(ctx, "web-2", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"update another node's status", func() error {
			_, err := web1.CoreV1().Nodes().Patch(ctx, "web-2", "application/merge-patch+json", []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
			return err
		}},
		{"create another node", func() error {
			_, err := web1.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "web-9"}}, metav1.CreateOptions{})
			return err
		}},
		{"a lease elsewhere", func() error {
			_, err := web1.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}}, metav1.CreateOptions{})
			return err
		}},
		{"namespaces", func() error {
			_, err := web1.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			return err
		}},
		// Labels and taints that would steer work to the node.
		{"give itself a role", func() error {
			_, err := web1.CoreV1().Nodes().Patch(ctx, "web-1", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/web":""}}}`), metav1.PatchOptions{})
			return err
		}},
		{"give itself a restricted label through its status", func() error {
			_, err := web1.CoreV1().Nodes().Patch(ctx, "web-1", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"node-restriction.kubernetes.io/secure":"true"}}}`), metav1.PatchOptions{}, "status")
			return err
		}},
		{"drop the role an administrator gave it", func() error {
			_, err := web1.CoreV1().Nodes().Patch(ctx, "web-1", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/db":null}}}`), metav1.PatchOptions{})
			return err
		}},
		{"taint itself", func() error {
			_, err := web1.CoreV1().Nodes().Patch(ctx, "web-1", "application/merge-patch+json", []byte(`{"spec":{"taints":[{"key":"k","effect":"NoSchedule"}]}}`), metav1.PatchOptions{})
			return err
		}},
	}
	for _, f := range forbidden {
		t.Run(f.name, func(t *testing.T) {
			if err := f.do(); !apierrors.IsForbidden(err) {
				t.Errorf("got %v, want Forbidden", err)
			}
		})
	}
}

func TestImpersonationAndReviews(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Users: authUsers()})
	ctx := context.Background()
	as := func(token, user string, groups ...string) kubernetes.Interface {
		c := s.ConfigFor(token)
		c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
		cs, err := kubernetes.NewForConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	_, err := as(apiservertest.AdminToken, "alice").CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{})
	want := `leases.coordination.k8s.io is forbidden: User "alice" cannot list resource "leases" in API group "coordination.k8s.io" in the namespace "default"`
	if err == nil || err.Error() != want {
		t.Errorf("admin as alice: got %v\nwant %s", err, want)
	}
	_, err = as(aliceToken, "bob").CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{})
	want = `users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope`
	if err == nil || err.Error() != want {
		t.Errorf("alice as bob: got %v\nwant %s", err, want)
	}
	if _, err := as(aliceToken, "alice", auth.GroupMasters).CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice adding system:masters: got %v, want Forbidden", err)
	}

	alice := clientFor(t, s, aliceToken)
	ssar, err := alice.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"},
	}}, metav1.CreateOptions{})
	if err != nil || ssar.Status.Allowed {
		t.Errorf("SelfSubjectAccessReview of get selfsubjectaccessreviews: %+v, %v; want not allowed", ssar, err)
	}
	ssar, err = alice.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/api"},
	}}, metav1.CreateOptions{})
	if err != nil || !ssar.Status.Allowed || !strings.Contains(ssar.Status.Reason, "system:discovery") {
		t.Errorf("SelfSubjectAccessReview of get /api: %+v, %v; want allowed by system:discovery", ssar.Status, err)
	}
	sar, err := s.Client(t, "").AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: "system:node:web-1", Groups: []string{auth.GroupNodes},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", Name: "web-1"},
	}}, metav1.CreateOptions{})
	if err != nil || !sar.Status.Allowed {
		t.Errorf("SubjectAccessReview for web-1's lease: %+v, %v", sar.Status, err)
	}
	if _, err := alice.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "bob"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice reviewing bob: got %v, want Forbidden", err)
	}
	ssrr, err := alice.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "default"}}, metav1.CreateOptions{})
	if err != nil || len(ssrr.Status.ResourceRules) == 0 || len(ssrr.Status.NonResourceRules) == 0 {
		t.Errorf("SelfSubjectRulesReview: %+v, %v", ssrr, err)
	}
}

// TestTokenReview checks the TokenReview a service sends to learn who
// holds a token, as kube-apiserver answers it: every authenticator asked,
// the audiences met, the permission of system:auth-delegator required.
func TestTokenReview(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Users: authUsers(), APIAudiences: []string{"https://leasehold.test", "fleet"}})
	ctx := context.Background()
	review := func(c kubernetes.Interface, spec authenticationv1.TokenReviewSpec) (authenticationv1.TokenReviewStatus, error) {
		tr, err := c.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			return authenticationv1.TokenReviewStatus{}, err
		}
		return tr.Status, nil
	}
	alice := clientFor(t, s, aliceToken)
	want := `tokenreviews.authentication.k8s.io is forbidden: User "alice" cannot create resource "tokenreviews" in API group "authentication.k8s.io" at the cluster scope`
	if _, err := review(alice, authenticationv1.TokenReviewSpec{Token: web1Token}); err == nil || err.Error() != want {
		t.Fatalf("alice without system:auth-delegator: got %v\nwant %s", err, want)
	}
	admin := s.Client(t, "")
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-delegator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web1 := authenticationv1.UserInfo{Username: "system:node:web-1", Groups: []string{auth.GroupNodes, auth.GroupAuthenticated}}
	for _, tc := range []struct {
		name string
		spec authenticationv1.TokenReviewSpec
		want authenticationv1.TokenReviewStatus
	}{
		{"the server's audiences", authenticationv1.TokenReviewSpec{Token: web1Token},
			authenticationv1.TokenReviewStatus{Authenticated: true, User: web1, Audiences: []string{"https://leasehold.test", "fleet"}}},
		{"one of them", authenticationv1.TokenReviewSpec{Token: web1Token, Audiences: []string{"elsewhere", "fleet", "fleet"}},
			authenticationv1.TokenReviewStatus{Authenticated: true, User: web1, Audiences: []string{"fleet"}}},
		{"none of them", authenticationv1.TokenReviewSpec{Token: web1Token, Audiences: []string{"elsewhere"}},
			authenticationv1.TokenReviewStatus{}},
		{"unknown token", authenticationv1.TokenReviewSpec{Token: "nobody's"},
			authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}},
		{"not one token", authenticationv1.TokenReviewSpec{Token: web1Token + " " + web1Token},
			authenticationv1.TokenReviewStatus{}},
	} {
		var got authenticationv1.TokenReviewStatus
		eventuallyAuth(t, tc.name, func() error {
			var err error
			got, err = review(alice, tc.spec)
			return err
		})
		if !apiequality.Semantic.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
	if _, err := review(alice, authenticationv1.TokenReviewSpec{}); !apierrors.IsBadRequest(err) || err.Error() != "token is required for TokenReview in authentication" {
		t.Errorf("no token: got %v, want 400", err)
	}
	// In protobuf, as a client-go built for it sends.
	cfg := s.ConfigFor(aliceToken)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	proto, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := review(proto, authenticationv1.TokenReviewSpec{Token: web1Token}); err != nil || !got.Authenticated || got.User.Username != web1.Username {
		t.Errorf("in protobuf: %+v, %v", got, err)
	}
}

// TestListsOfNone: kubectl describe node and kubectl drain list the node's
// pods, kubectl describe namespace its limit ranges, and kubectl create -f
// of a review lists the CustomResourceDefinitions to validate it;
// leasehold answers that there are none, to those who may list them.
func TestListsOfNone(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Users: authUsers()})
	ctx := context.Background()
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	client := func(c *rest.Config) dynamic.Interface {
		d, err := dynamic.NewForConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	list, err := client(s.Config).Resource(crds).List(ctx, metav1.ListOptions{})
	if err != nil || list.GetKind() != "CustomResourceDefinitionList" || len(list.Items) != 0 {
		t.Errorf("admin: %+v, %v; want an empty CustomResourceDefinitionList", list, err)
	}
	want := `customresourcedefinitions.apiextensions.k8s.io is forbidden: User "alice" cannot list resource "customresourcedefinitions" in API group "apiextensions.k8s.io" at the cluster scope`
	if _, err := client(s.ConfigFor(aliceToken)).Resource(crds).List(ctx, metav1.ListOptions{}); err == nil || err.Error() != want {
		t.Errorf("alice: %v\nwant %s", err, want)
	}
	pods, err := s.Client(t, "").CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=web-1"})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("admin listing web-1's pods: %+v, %v; want an empty PodList", pods, err)
	}
	if pods, err := s.Client(t, "").CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
		t.Errorf("admin listing the pods of default: %+v, %v; want an empty PodList", pods, err)
	}
	if lrs, err := s.Client(t, "").CoreV1().LimitRanges("default").List(ctx, metav1.ListOptions{}); err != nil || len(lrs.Items) != 0 {
		t.Errorf("admin listing the limit ranges of default: %+v, %v; want an empty LimitRangeList", lrs, err)
	}
	want = `pods is forbidden: User "alice" cannot list resource "pods" in API group "" at the cluster scope`
	if _, err := clientFor(t, s, aliceToken).CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err == nil || err.Error() != want {
		t.Errorf("alice listing pods: %v\nwant %s", err, want)
	}
	for _, verb := range []func() error{
		func() error {
			_, err := s.Client(t, "").CoreV1().Pods("default").Get(ctx, "x", metav1.GetOptions{})
			return err
		},
		func() error { _, err := client(s.Config).Resource(crds).Get(ctx, "x", metav1.GetOptions{}); return err },
		func() error { _, err := client(s.Config).Resource(crds).Watch(ctx, metav1.ListOptions{}); return err },
		func() error {
			_, err := client(s.Config).Resource(crds).Namespace("default").List(ctx, metav1.ListOptions{})
			return err
		},
	} {
		if err := verb(); !apierrors.IsNotFound(err) {
			t.Errorf("another request for pods or CustomResourceDefinitions: %v, want 404", err)
		}
	}
}

func TestEscalationPrevented(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Users: authUsers()})
	ctx := context.Background()
	admin := s.Client(t, "")
	if _, err := admin.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-admin"},
		RoleRef:    rbacv1.RoleRef{Kind: "ClusterRole", Name: "admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice := clientFor(t, s, aliceToken)
	role := func(name string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
		return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	}
	eventuallyAuth(t, "admin of default creates a role within its rights", func() error {
		_, err := alice.RbacV1().Roles("default").Create(ctx, role("lease-reader",
			rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}}), metav1.CreateOptions{})
		return err
	})
	_, err := alice.RbacV1().Roles("default").Create(ctx, role("too-much",
		rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "attempting to grant RBAC permissions not currently held") {
		t.Errorf("role beyond her rights: got %v", err)
	}
	_, err = alice.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "self-admin"},
		RoleRef:    rbacv1.RoleRef{Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}},
	}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("binding cluster-admin: got %v, want Forbidden", err)
	}
	if _, err := alice.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bob-reads"},
		RoleRef:    rbacv1.RoleRef{Kind: "Role", Name: "lease-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "bob"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Errorf("binding a role within her rights: %v", err)
	}
	// A binding to a role that is not there is the lookup's 404.
	_, err = alice.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "to-nothing"},
		RoleRef:    rbacv1.RoleRef{Kind: "Role", Name: "nope"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "bob"}},
	}, metav1.CreateOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("binding a missing role: got %v, want NotFound", err)
	}
	// Finalizers and owner references are the garbage collector's: a
	// change of them alone grants nothing, so it is not checked.
	if _, err := admin.RbacV1().Roles("default").Create(ctx, role("beyond",
		rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.RbacV1().Roles("default").Patch(ctx, "beyond", types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/x"]}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("a finalizer on a role beyond her rights: %v", err)
	}
	if _, err := alice.RbacV1().Roles("default").Patch(ctx, "beyond", types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a label on a role beyond her rights: got %v, want Forbidden", err)
	}
}

// TestAggregationRuleNeedsEverything: a user who may write ClusterRoles,
// but holds less than every permission, may not give one an
// aggregationRule (which would gather cluster-admin's rules for her), as
// Kubernetes refuses it; a grant of escalate by name covers updates of that
// role, not its create.
func TestAggregationRuleNeedsEverything(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Users: authUsers()})
	ctx := context.Background()
	admin := s.Client(t, "")
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "role-writer"},
		Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"create", "get", "list", "update", "patch"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles", "roles"}},
			{Verbs: []string{"escalate"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles"}, ResourceNames: []string{"named"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-writes-roles"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "role-writer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice := clientFor(t, s, aliceToken)
	eventuallyAuth(t, "a cluster role within her rights", func() error {
		_, err := alice.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "small"},
			Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"}}}}, metav1.CreateOptions{})
		return err
	})
	const msg = "must have cluster-admin privileges to use the aggregationRule"
	_, err := alice.RbacV1().ClusterRoles().Patch(ctx, "small", types.MergePatchType,
		[]byte(`{"aggregationRule":{"clusterRoleSelectors":[{"matchLabels":{"kubernetes.io/bootstrapping":"rbac-defaults"}}]}}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), msg) {
		t.Errorf("an aggregationRule on an update: got %v, want Forbidden %q", err, msg)
	}
	_, err = alice.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sneaky"},
		AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}}}}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), msg) {
		t.Errorf("an aggregationRule on a create: got %v, want Forbidden %q", err, msg)
	}
	_, err = alice.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "named"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}}}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("a create of a role she may escalate by name: got %v, want Forbidden", err)
	}
}

// auditLog runs an audit logger of the policy, writing to out; flush stops
// it once everything logged is in out.
func auditLog(t *testing.T, policy string, out *syncbuf.Buffer) (logger *audit.Logger, flush func()) {
	t.Helper()
	p, err := audit.ParsePolicy([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	logger, err = audit.New(audit.Config{Out: out, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { logger.Run(ctx); close(done) }()
	return logger, func() { cancel(); <-done }
}

func TestAuditEvents(t *testing.T) {
	var out syncbuf.Buffer
	logger, flush := auditLog(t, `
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: RequestResponse
  resources: [{group: coordination.k8s.io, resources: [leases]}]
- level: Metadata
`, &out)
	s := apiservertest.Start(t, apiservertest.Options{Users: authUsers(), Audit: logger})
	alice := clientFor(t, s, aliceToken)
	admin := s.Client(t, "")
	if _, err := admin.CoordinationV1().Leases("default").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "audited"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("me")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice.CoordinationV1().Leases("default").Get(context.Background(), "audited", metav1.GetOptions{})
	aliceAsBob := s.ConfigFor(aliceToken)
	aliceAsBob.Impersonate = rest.ImpersonationConfig{UserName: "bob"}
	if c, err := kubernetes.NewForConfig(aliceAsBob); err == nil {
		c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	}
	dialWatch(t, s, "/api/v1/namespaces?watch=1", "").Close()
	bad := s.ConfigFor("no-such-token")
	if c, err := kubernetes.NewForConfig(bad); err == nil {
		c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	}
	toUpdate, err := admin.CoordinationV1().Leases("default").Get(context.Background(), "audited", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	toUpdate.Spec.HolderIdentity = ptr.To("you")
	if _, err := admin.CoordinationV1().Leases("default").Update(context.Background(), toUpdate, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CoordinationV1().Leases("default").Delete(context.Background(), "audited", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A client's own audit ID, however long, is the event's and is echoed
	// back; the forwarded-for addresses come first, the peer's last.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(client.CloseIdleConnections)
	clientID := strings.Repeat("x", 80)
	raw := func(token, id string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", s.URL+"/api/v1/namespaces/default?raw=1", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Forwarded-For", "127.0.0.1, 10.9.9.9")
		req.Header.Set("User-Agent", strings.Repeat("u", 1100))
		if id != "" {
			req.Header.Set("Audit-ID", id)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	adminResp := raw(apiservertest.AdminToken, clientID)
	if got := adminResp.Header.Get("Audit-Id"); got != clientID {
		t.Errorf("Audit-Id %q, want the client's %q", got, clientID)
	}
	unauthResp := raw("no-such-token", "")
	unauthID := unauthResp.Header.Get("Audit-Id")
	if unauthID == "" {
		t.Error("no Audit-Id on a 401")
	}
	// As kube-apiserver: no response is cached, a success or an error.
	for _, resp := range []*http.Response{adminResp, unauthResp} {
		if got := resp.Header.Values("Cache-Control"); !slices.Equal(got, []string{"no-cache, private"}) {
			t.Errorf("%d: Cache-Control %q", resp.StatusCode, got)
		}
		if got := resp.Header.Values("Content-Type"); !slices.Equal(got, []string{"application/json"}) {
			t.Errorf("%d: Content-Type %q", resp.StatusCode, got)
		}
	}
	badTimeout, err := client.Get(s.URL + "/api/v1/namespaces?timeout=bogus")
	if err != nil {
		t.Fatal(err)
	}
	badTimeout.Body.Close()
	if badTimeout.StatusCode != http.StatusBadRequest {
		t.Errorf("a timeout that does not parse: %d, want 400", badTimeout.StatusCode)
	}
	s.Stop()
	flush()

	text := out.String()
	for _, secret := range []string{aliceToken, apiservertest.AdminToken, "no-such-token"} {
		if strings.Contains(text, secret) {
			t.Errorf("the audit log holds a token: %s", secret)
		}
	}
	var events []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		events = append(events, ev)
	}
	find := func(pred func(ev map[string]any) bool) map[string]any {
		for _, ev := range events {
			if pred(ev) {
				return ev
			}
		}
		return nil
	}
	user := func(ev map[string]any) string { return ev["user"].(map[string]any)["username"].(string) }
	created := find(func(ev map[string]any) bool {
		return ev["verb"] == "create" && ev["stage"] == "ResponseComplete" && ev["objectRef"].(map[string]any)["resource"] == "leases"
	})
	if created == nil {
		t.Fatalf("no ResponseComplete event for the create in:\n%s", text)
	}
	if created["apiVersion"] != "audit.k8s.io/v1" || created["kind"] != "Event" || created["level"] != "RequestResponse" ||
		created["requestObject"] == nil || created["responseObject"] == nil || created["auditID"] == "" ||
		created["requestReceivedTimestamp"] == nil || created["stageTimestamp"] == nil {
		t.Errorf("create event: %v", created)
	}
	if a := created["annotations"].(map[string]any); a[audit.AnnotationDecision] != "allow" {
		t.Errorf("create annotations: %v", a)
	}
	if ref := created["objectRef"].(map[string]any); ref["name"] != "audited" || ref["namespace"] != "default" {
		t.Errorf("create objectRef %v, want the created Lease's name and namespace", ref)
	}
	if find(func(ev map[string]any) bool { return ev["verb"] == "create" && ev["stage"] == "RequestReceived" }) == nil {
		t.Error("no RequestReceived stage")
	}
	denied := find(func(ev map[string]any) bool {
		return user(ev) == "alice" && ev["verb"] == "get" && ev["stage"] == "ResponseComplete"
	})
	if denied == nil {
		t.Fatalf("no event for alice's get")
	}
	if rs := denied["responseStatus"].(map[string]any); rs["code"] != float64(403) || rs["reason"] != "Forbidden" {
		t.Errorf("denied responseStatus %v", rs)
	}
	if a := denied["annotations"].(map[string]any); a[audit.AnnotationDecision] != "forbid" {
		t.Errorf("denied annotations %v", a)
	}
	impersonating := find(func(ev map[string]any) bool {
		return user(ev) == "alice" && ev["verb"] == "list" && ev["stage"] == "ResponseComplete"
	})
	if impersonating == nil {
		t.Fatal("no event for alice's impersonation")
	}
	if rs := impersonating["responseStatus"].(map[string]any); rs["code"] != float64(403) || impersonating["annotations"] != nil {
		t.Errorf("a refused impersonation: responseStatus %v, annotations %v; want 403 and no decision", rs, impersonating["annotations"])
	}
	// A watch over a WebSocket answers 101 Switching Protocols, as
	// kube-apiserver records it.
	for _, stage := range []string{"ResponseStarted", "ResponseComplete"} {
		ws := find(func(ev map[string]any) bool {
			return ev["verb"] == "watch" && ev["stage"] == stage && ev["requestURI"] == "/api/v1/namespaces?watch=1"
		})
		if ws == nil {
			t.Errorf("no %s event for the watch over a WebSocket", stage)
		} else if rs := ws["responseStatus"].(map[string]any); rs["code"] != float64(http.StatusSwitchingProtocols) || user(ws) != "test-admin" {
			t.Errorf("the watch over a WebSocket, %s: %s got %v, want 101", stage, user(ws), rs)
		}
	}
	unauth := find(func(ev map[string]any) bool {
		rs, _ := ev["responseStatus"].(map[string]any)
		return rs != nil && rs["code"] == float64(401)
	})
	if unauth == nil {
		t.Error("no event for the unauthenticated request")
	}
	// A request that failed authentication has one event, at
	// ResponseStarted, as in kube-apiserver.
	var unauthStages []any
	for _, ev := range events {
		if ev["auditID"] == unauthID {
			unauthStages = append(unauthStages, ev["stage"])
		}
	}
	if !slices.Equal(unauthStages, []any{"ResponseStarted"}) {
		t.Errorf("stages of the 401: %v, want one ResponseStarted", unauthStages)
	}
	var timeoutEvents []any
	for _, ev := range events {
		if ev["requestURI"] == "/api/v1/namespaces?timeout=bogus" {
			timeoutEvents = append(timeoutEvents, ev["stage"], ev["responseStatus"].(map[string]any)["code"])
		}
	}
	if !slices.Equal(timeoutEvents, []any{"ResponseStarted", float64(400)}) {
		t.Errorf("the bad timeout's events: %v, want one at ResponseStarted with 400", timeoutEvents)
	}
	updated := find(func(ev map[string]any) bool { return ev["verb"] == "update" && ev["stage"] == "ResponseComplete" })
	if updated == nil {
		t.Fatal("no event for the update")
	}
	if ref := updated["objectRef"].(map[string]any); ref["uid"] != string(toUpdate.UID) || ref["resourceVersion"] != toUpdate.ResourceVersion {
		t.Errorf("the update's objectRef %v, want the uid %s and resourceVersion %s it sent", ref, toUpdate.UID, toUpdate.ResourceVersion)
	}
	deleted := find(func(ev map[string]any) bool { return ev["verb"] == "delete" && ev["stage"] == "ResponseComplete" })
	if deleted == nil {
		t.Fatal("no event for the delete")
	}
	if rs := deleted["responseStatus"].(map[string]any); rs["status"] != "Success" || rs["details"] == nil || deleted["responseObject"] == nil {
		t.Errorf("the delete's responseStatus %v and responseObject %v, want its Success Status", rs, deleted["responseObject"])
	}
	own := find(func(ev map[string]any) bool { return ev["auditID"] == clientID && ev["stage"] == "ResponseComplete" })
	if own == nil {
		t.Fatal("no event under the client's audit ID")
	}
	if ips := own["sourceIPs"].([]any); !slices.Equal(ips, []any{"127.0.0.1", "10.9.9.9", "127.0.0.1"}) {
		t.Errorf("sourceIPs %v, want the forwarded two, then the peer", ips)
	}
	if ua := own["userAgent"].(string); ua != strings.Repeat("u", 1024)+"...TRUNCATED" {
		t.Errorf("userAgent of %d bytes ending %q, want it cut to 1024 and marked", len(ua), ua[max(0, len(ua)-20):])
	}
	received := find(func(ev map[string]any) bool { return ev["stage"] == "RequestReceived" })
	if received["stageTimestamp"] != received["requestReceivedTimestamp"] {
		t.Errorf("RequestReceived at %v, received %v: want the same", received["stageTimestamp"], received["requestReceivedTimestamp"])
	}
}

func TestInFlightLimitPerUser(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Users: authUsers(), MaxRequestsInFlightPerUser: 1})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(client.CloseIdleConnections)
	const review = `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{"nonResourceAttributes":{"verb":"get","path":"/api"}}}`
	// The server is ready only once the authorizer sees the bootstrap role
	// bindings that let every user create access reviews: the very first
	// request is allowed, so the held request below is not refused before
	// it reads its body.
	first, _ := http.NewRequest("POST", s.URL+"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", strings.NewReader(review))
	first.Header.Set("Authorization", "Bearer "+aliceToken)
	first.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(first)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("alice's first access review right after start: status %d, want 201", resp.StatusCode)
	}
	// Alice's first request holds her only slot while its body trickles.
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", s.URL+"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", pr)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	req.Header.Set("Content-Type", "application/json")
	held := make(chan error, 1)
	go func() {
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		held <- err
	}()
	// Each 429 is counted among the requests, as kube-apiserver counts
	// those its in-flight limit refuses.
	refusals := func() float64 {
		t.Helper()
		n := metricValue(t, apiserver.Collectors(), "apiserver_request_total", map[string]string{"verb": "LIST", "resource": "leases", "code": "429"})
		// ... and as a termination, as kube-apiserver's
		// apiserver_request_terminations_total counts them.
		if m := metricValue(t, apiserver.Collectors(), "apiserver_request_terminations_total", map[string]string{"verb": "LIST", "resource": "leases", "code": "429"}); m != n {
			t.Errorf("%v terminations for %v requests counted 429", m, n)
		}
		return n
	}
	refusedBefore, refused := refusals(), 0
	get := func(token string) *http.Response {
		r, _ := http.NewRequest("GET", s.URL+"/apis/coordination.k8s.io/v1/namespaces/default/leases", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			refused++
		}
		return resp
	}
	eventuallyAuth(t, "alice's second request is refused with 429", func() error {
		resp := get(aliceToken)
		if resp.StatusCode != http.StatusTooManyRequests {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		if resp.Header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
		return nil
	})
	if resp := get(apiservertest.AdminToken); resp.StatusCode != http.StatusOK {
		t.Errorf("system:masters is not limited: got %d", resp.StatusCode)
	}
	if resp := get(web1Token); resp.StatusCode == http.StatusTooManyRequests {
		t.Errorf("another user got 429")
	}
	if got := refusals() - refusedBefore; got != float64(refused) {
		t.Errorf("apiserver_request_total counted %v requests refused with 429, want %d", got, refused)
	}
	pw.Write([]byte(review))
	pw.Close()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	eventuallyAuth(t, "alice is served again", func() error {
		if resp := get(aliceToken); resp.StatusCode == http.StatusTooManyRequests {
			return fmt.Errorf("still 429")
		}
		return nil
	})
}

// TestSlowBodyIsCutOff sends a body one byte at a time, far slower than the
// read timeout allows, and expects the server to give up on it.
func TestSlowBodyIsCutOff(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{RequestReadTimeout: 300 * time.Millisecond})
	u, _ := url.Parse(s.URL)
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const size = 200
	fmt.Fprintf(conn, "POST /apis/coordination.k8s.io/v1/namespaces/default/leases HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", u.Host, apiservertest.AdminToken, size)
	respCh := make(chan *http.Response, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			close(respCh)
			return
		}
		respCh <- resp
	}()
	sent := 0
	for ; sent < size; sent++ {
		select {
		case resp, ok := <-respCh:
			if ok && resp.StatusCode < 400 {
				t.Fatalf("a trickled body was accepted: %d", resp.StatusCode)
			}
			return // cut off before the body was complete
		case <-time.After(50 * time.Millisecond): // the client's slowness, not a wait on the server
		}
		if _, err := conn.Write([]byte{' '}); err != nil {
			return // the server closed the connection
		}
	}
	t.Fatalf("the server read all %d bytes over %v without cutting the client off", size, time.Duration(size)*50*time.Millisecond)
}

// TestSetAuthorization: the authorizers a running server uses are replaced
// at once, as --authorization-config's reloads replace them: a webhook
// that allows alice what RBAC does not, put after RBAC, then taken away;
// SelfSubjectAccessReview follows.
func TestSetAuthorization(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{Users: authUsers()})
	ctx := context.Background()
	alice := clientFor(t, s, aliceToken)
	var asked atomic.Int32
	hook := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		var review authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ra := review.Spec.ResourceAttributes
		review.Status.Allowed = review.Spec.User == "alice" && ra != nil && ra.Resource == "nodes" && ra.Verb == "list"
		review.Status.Reason = "the fleet team may list nodes"
		json.NewEncoder(w).Encode(&review)
	}))
	defer hook.Close()
	kubeconfig := filepath.Join(t.TempDir(), "hook.kubeconfig")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hook.Certificate().Raw})
	if err := pki.WriteKubeconfig(kubeconfig, pki.KubeconfigSpec{Server: hook.URL, CAPEM: caPEM, User: "leasehold", Token: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("alice lists nodes under RBAC and Node: %v; want 403", err)
	}
	// Only node lists go to the webhook (a CEL matchCondition).
	cfg := apiserverconfig.AuthorizationConfiguration{Authorizers: []apiserverconfig.AuthorizerConfiguration{
		{Type: "RBAC", Name: "rbac"}, {Type: "Node", Name: "node"},
		{Type: "Webhook", Name: "fleet", Webhook: auth.AuthorizationWebhookFlags{ConfigFile: kubeconfig, AllowedTTL: time.Minute, DeniedTTL: time.Second}.Webhook()},
	}}
	cfg.Authorizers[2].Webhook.MatchConditions = []apiserverconfig.WebhookMatchCondition{{Expression: "has(request.resourceAttributes) && request.resourceAttributes.resource == 'nodes'"}}
	if err := auth.ValidateAuthorizationConfig(&cfg); err != nil {
		t.Fatal(err)
	}
	if err := s.API.SetAuthorization(&cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("alice lists nodes with the webhook: %v", err)
	}
	if _, err := alice.CoordinationV1().Leases("kube-node-lease").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice lists leases, which the webhook is not asked about: %v; want 403", err)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the webhook was asked %d times, want 1", n)
	}
	review, err := alice.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"},
	}}, metav1.CreateOptions{})
	if err != nil || !review.Status.Allowed || review.Status.Reason != "the fleet team may list nodes" {
		t.Errorf("can-i list nodes: %+v, %v", review, err)
	}

	if err := s.API.SetAuthorization(apiserver.DefaultAuthorization()); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice lists nodes once the webhook is gone: %v; want 403", err)
	}
	// A webhook whose kubeconfig is gone leaves the chain as it was.
	cfg.Authorizers[2].Webhook.ConnectionInfo.KubeConfigFile = ptr.To(filepath.Join(t.TempDir(), "missing"))
	if err := s.API.SetAuthorization(&cfg); err == nil {
		t.Error("a webhook without its kubeconfig was put in use")
	}
	if _, err := alice.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice lists nodes after a failed change: %v; want 403", err)
	}
}
