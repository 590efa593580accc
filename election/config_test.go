package election

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

func TestNewValidates(t *testing.T) {
	client := fake.NewClientset().CoordinationV1()
	valid := func() Config {
		return Config{Client: client, Namespace: "default", Name: "job", Identity: "me"}
	}
	tests := []struct {
		name    string
		change  func(*Config)
		wantErr string // "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"explicit", func(c *Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 4*time.Second, 3*time.Second, time.Second
		}, ""},
		{"no client", func(c *Config) { c.Client = nil }, "client must be set"},
		{"no namespace", func(c *Config) { c.Namespace = "" }, "namespace must be set"},
		{"bad namespace", func(c *Config) { c.Namespace = "Not_Valid" }, `namespace "Not_Valid"`},
		{"no name", func(c *Config) { c.Name = "" }, "name must be set"},
		{"bad name", func(c *Config) { c.Name = "a/b" }, `name "a/b"`},
		{"no identity", func(c *Config) { c.Identity = "" }, "identity must not be empty"},
		{"lease not above renew", func(c *Config) { c.LeaseDuration, c.RenewDeadline = 10*time.Second, 10*time.Second }, "leaseDuration must be greater than renewDeadline"},
		{"renew not above jittered retry", func(c *Config) { c.RetryPeriod = 9 * time.Second }, "renewDeadline must be greater than retryPeriod*JitterFactor"},
		{"negative lease", func(c *Config) { c.LeaseDuration = -time.Second }, "leaseDuration must be greater than zero"},
		{"negative renew", func(c *Config) { c.RenewDeadline = -time.Second }, "renewDeadline must be greater than zero"},
		{"negative retry", func(c *Config) { c.RetryPeriod = -time.Second }, "retryPeriod must be greater than zero"},
		{"negative request timeout", func(c *Config) { c.RequestTimeout = -time.Second }, "requestTimeout must not be negative"},
		{"fractional lease", func(c *Config) { c.LeaseDuration = 15500 * time.Millisecond }, "whole number of seconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid()
			tt.change(&cfg)
			e, err := New(cfg)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("New: error %v, want one containing %q", err, tt.wantErr)
			case tt.wantErr == "" && e == nil:
				t.Fatal("New returned nil")
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	e, err := New(Config{Client: fake.NewClientset().CoordinationV1(), Namespace: "default", Name: "job", Identity: "me"})
	if err != nil {
		t.Fatal(err)
	}
	if e.cfg.LeaseDuration != 15*time.Second || e.cfg.RenewDeadline != 10*time.Second || e.cfg.RetryPeriod != 2*time.Second ||
		e.cfg.Clock == nil || e.cfg.Logger == nil || e.durationSeconds != 15 {
		t.Errorf("defaults: %+v", e.cfg)
	}
}

// FuzzValidate checks that validation never panics and that every accepted
// configuration keeps client-go's ordering of durations.
func FuzzValidate(f *testing.F) {
	f.Add("default", "job", "me", int64(15e9), int64(10e9), int64(2e9))
	f.Add("", "", "", int64(0), int64(0), int64(0))
	f.Add("kube-system", "a.b", "x", int64(1e9), int64(5e8), int64(1e8))
	client := fake.NewClientset().CoordinationV1()
	f.Fuzz(func(t *testing.T, ns, name, id string, ld, rd, rp int64) {
		e, err := New(Config{Client: client, Namespace: ns, Name: name, Identity: id,
			LeaseDuration: time.Duration(ld), RenewDeadline: time.Duration(rd), RetryPeriod: time.Duration(rp)})
		if err != nil {
			return
		}
		c := e.cfg
		if !(c.LeaseDuration > c.RenewDeadline && c.RenewDeadline > time.Duration(JitterFactor*float64(c.RetryPeriod)) && c.RetryPeriod > 0) ||
			c.Identity == "" || e.durationSeconds < 1 {
			t.Fatalf("accepted %+v", c)
		}
	})
}
