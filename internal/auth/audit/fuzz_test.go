package audit

import (
	"testing"

	"github.com/leasehold/leasehold/internal/auth"
)

func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(policyYAML))
	f.Add([]byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePolicy(data)
		if err != nil {
			return
		}
		d := p.Decide(auth.Attributes{User: &auth.User{Name: "x"}, Verb: "get", ResourceRequest: true, Resource: "leases"})
		switch d.Level {
		case LevelNone, LevelMetadata, LevelRequest, LevelRequestResponse:
		default:
			t.Errorf("level %q", d.Level)
		}
	})
}
