package agent_test

import (
	"context"
	"fmt"
	"runtime"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/agent"
)

// An agent registers its node and creates the node's lease on its first
// pass. Here it runs against a fake clientset and a fake clock; `leasehold
// agent` gives it clients built from --kubeconfig and --server and the real
// clock.
func Example() {
	client := fake.NewSimpleClientset()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a, err := agent.New(agent.Config{
		Clients:   []kubernetes.Interface{client},
		NodeName:  "web-1",
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.7"}},
		Clock:     clk,
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	for !clk.HasWaiters() { // the agent waits for its next renewal: the first pass is over
		runtime.Gosched()
	}
	stop()
	fmt.Println("Run returned", <-done)

	lease, err := client.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), "web-1", metav1.GetOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("holder:", *lease.Spec.HolderIdentity)
	fmt.Println("duration:", *lease.Spec.LeaseDurationSeconds)
	fmt.Println("owner:", lease.OwnerReferences[0].Kind, lease.OwnerReferences[0].Name)
	// Output:
	// Run returned <nil>
	// holder: web-1
	// duration: 40
	// owner: Node web-1
}
