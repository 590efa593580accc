package pki_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/pki"
)

// Example shows what leasehold serve does on its first start: a CA, a
// serving certificate for the listen host, an admin token, and a kubeconfig
// that kubectl uses as it is.
func Example() {
	dir, err := os.MkdirTemp("", "leasehold-data")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ca, err := pki.LoadOrCreateCA(dir, clock.RealClock{})
	if err != nil {
		log.Fatal(err)
	}
	serving, err := ca.LoadOrIssueServing(dir, []string{"127.0.0.1"}, clock.RealClock{})
	if err != nil {
		log.Fatal(err)
	}
	token, err := pki.NewToken()
	if err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(dir, "admin.kubeconfig")
	err = pki.WriteKubeconfig(path, pki.KubeconfigSpec{
		Server: "https://127.0.0.1:6443",
		CAPEM:  ca.CertPEM,
		User:   "admin",
		Token:  token,
	})
	if err != nil {
		log.Fatal(err)
	}

	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("serving certificate for:", serving.Leaf.DNSNames, serving.Leaf.IPAddresses)
	fmt.Println("current context:", cfg.CurrentContext)
	fmt.Println("server:", cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster].Server)
	// Output:
	// serving certificate for: [localhost] [127.0.0.1 ::1]
	// current context: admin@leasehold
	// server: https://127.0.0.1:6443
}
