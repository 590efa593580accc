package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/leasehold/leasehold/internal/pki"
)

// TestCertificateExpiryMetric: /metrics gives when the CA and the serving
// certificate in the data directory expire.
func TestCertificateExpiryMetric(t *testing.T) {
	needKubectl(t)
	s := shared(t)
	out := s.kubectl(t, "get", "--raw", "/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(out))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	fam := families["leasehold_certificate_expiration_timestamp_seconds"]
	if fam == nil {
		t.Fatal("/metrics has no leasehold_certificate_expiration_timestamp_seconds")
	}
	got := map[string]int64{}
	for _, m := range fam.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "certificate" {
				got[l.GetValue()] = int64(m.GetGauge().GetValue())
			}
		}
	}
	for which, file := range map[string]string{"ca": pki.CACertFile, "serving": pki.ServingCertFile} {
		data, err := os.ReadFile(filepath.Join(s.dataDir, file))
		if err != nil {
			t.Fatal(err)
		}
		cert, err := pki.ParseCertPEM(data)
		if err != nil {
			t.Fatal(err)
		}
		if got[which] != cert.NotAfter.Unix() {
			t.Errorf("certificate=%q: %d; want %s's notAfter, %d", which, got[which], file, cert.NotAfter.Unix())
		}
	}
}
