package election_test

import (
	"context"
	"fmt"
	"log"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/leasehold/leasehold/election"
)

// One contender leads, does its work with the term's fencing token, and
// releases the Lease when it is done. In a real program the client comes
// from kubernetes.NewForConfig with a kubeconfig for the leasehold server,
// and the identity is unique per process (hostname plus a random suffix).
func Example() {
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	e, err := election.New(election.Config{
		Client:          client.CoordinationV1(),
		Namespace:       "default",
		Name:            "nightly-report",
		Identity:        "worker-1",
		ReleaseOnCancel: true,
		Callbacks: election.Callbacks{
			OnStartedLeading: func(ctx context.Context, term election.Term) {
				fmt.Printf("%s leads with fencing token %d\n", term.Identity, term.FencingToken)
				// Work here, sending term.FencingToken with every write,
				// and stop as soon as ctx is done. This example's work is
				// over at once: it ends the election.
				cancel()
				<-ctx.Done()
			},
			OnStoppedLeading: func() { fmt.Println("stopped leading") },
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Run(ctx); err != nil {
		log.Fatal(err)
	}

	lease, err := client.CoordinationV1().Leases("default").Get(context.Background(), "nightly-report", metav1.GetOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("holder after release: %q, lease transitions: %d\n", *lease.Spec.HolderIdentity, *lease.Spec.LeaseTransitions)
	// Output:
	// worker-1 leads with fencing token 0
	// stopped leading
	// holder after release: "", lease transitions: 0
}
