package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/auth"
)

// TestIdentityFlags: the user a token or certificate is for. A node's
// name must be one a Node may have, or the credential could register
// nothing.
func TestIdentityFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flags   identityFlags
		user    string
		groups  []string
		wantErr string
	}{
		{"user", identityFlags{user: "alice", groups: stringsFlag{"devs"}}, "alice", []string{"devs"}, ""},
		{"node", identityFlags{node: "web-1.example.com"}, "system:node:web-1.example.com", []string{auth.GroupNodes}, ""},
		{"node and a group", identityFlags{node: "web-1", groups: stringsFlag{"racks"}}, "system:node:web-1", []string{auth.GroupNodes, "racks"}, ""},
		{"node name with a space", identityFlags{node: "Bad Name"}, "", nil, `--node "Bad Name" is not a valid node name`},
		{"node name with an underscore", identityFlags{node: "web_1"}, "", nil, "lowercase RFC 1123 subdomain"},
		{"both", identityFlags{user: "a", node: "b"}, "", nil, "not both"},
		{"neither", identityFlags{}, "", nil, "is required"},
	} {
		u, err := tc.flags.toUser()
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case u.Name != tc.user || !slices.Equal(u.Groups, tc.groups):
			t.Errorf("%s: user %q groups %q, want %q %q", tc.name, u.Name, u.Groups, tc.user, tc.groups)
		}
	}
}
