package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// TestServingRenews: a serving certificate is kept while more than 30 days
// remain, and renewed once fewer do, for the running server and in the
// data directory; a replica sharing the directory then loads the renewed
// certificate rather than issuing one of its own.
func TestServingRenews(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	clk := testingclock.NewFakeClock(t0)
	hosts := []string{"10.0.0.5"}
	a, err := ca.NewServing(dir, hosts, clk)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ca.NewServing(dir, hosts, clk)
	if err != nil {
		t.Fatal(err)
	}
	first := serial(t, a)
	if serial(t, b) != first {
		t.Fatal("a second replica issued a certificate of its own at start")
	}
	notAfter := leaf(t, a).NotAfter

	clk.SetTime(notAfter.Add(-servingRenewBefore - time.Minute))
	if renewed, err := a.Renew(); renewed || err != nil {
		t.Fatalf("Renew with more than 30 days left: %v, %v; want false, nil", renewed, err)
	}
	if serial(t, a) != first {
		t.Fatal("the certificate changed with more than 30 days left")
	}

	clk.SetTime(notAfter.Add(-servingRenewBefore + time.Minute))
	if renewed, err := a.Renew(); !renewed || err != nil {
		t.Fatalf("Renew within 30 days of expiry: %v, %v; want true, nil", renewed, err)
	}
	renewed := leaf(t, a)
	if renewed.SerialNumber.String() == first {
		t.Fatal("Renew kept the certificate that is due")
	}
	if !renewed.NotAfter.After(notAfter) {
		t.Fatalf("the renewed certificate ends at %v, not after the old one's %v", renewed.NotAfter, notAfter)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := renewed.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.0.0.5", CurrentTime: clk.Now()}); err != nil {
		t.Fatalf("the renewed certificate: %v", err)
	}
	onDisk, err := os.ReadFile(filepath.Join(dir, ServingCertFile))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := ParseCertPEM(onDisk); err != nil || c.SerialNumber.Cmp(renewed.SerialNumber) != 0 {
		t.Fatalf("the data directory does not hold the renewed certificate: %v", err)
	}

	if ok, err := b.Renew(); !ok || err != nil {
		t.Fatalf("the second replica's Renew: %v, %v; want true, nil", ok, err)
	}
	if serial(t, b) != renewed.SerialNumber.String() {
		t.Fatal("the second replica issued a certificate of its own instead of loading the renewed one")
	}
}

// TestServingRunRenews: Run checks every hour and serves the renewed
// certificate to the handshakes that follow, in time for a server that
// runs a year without a restart. Time is the synctest bubble's.
func TestServingRunRenews(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		clk := clock.RealClock{}
		ca, err := LoadOrCreateCA(dir, clk)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ca.NewServing(dir, nil, clk)
		if err != nil {
			t.Fatal(err)
		}
		first, due := serial(t, s), leaf(t, s).NotAfter.Add(-servingRenewBefore)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx, clk, ServingCheckInterval, slog.New(slog.DiscardHandler)); close(done) }()
		defer func() { cancel(); <-done }()

		time.Sleep(time.Until(due) - time.Minute)
		synctest.Wait()
		if serial(t, s) != first {
			t.Fatal("Run renewed the certificate before it was due")
		}
		time.Sleep(ServingCheckInterval + time.Minute)
		synctest.Wait()
		if serial(t, s) == first {
			t.Fatal("Run did not renew the certificate within an hour of its being due")
		}
		if left := time.Until(leaf(t, s).NotAfter); left < servingValidity-ServingCheckInterval-time.Hour {
			t.Fatalf("the renewed certificate has %v left", left)
		}
	})
}

func leaf(t *testing.T, s *Serving) *x509.Certificate {
	t.Helper()
	c, err := s.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil || c.Leaf == nil {
		t.Fatalf("GetCertificate: %v, leaf %v", err, c.Leaf)
	}
	return c.Leaf
}

func serial(t *testing.T, s *Serving) string { return leaf(t, s).SerialNumber.String() }
