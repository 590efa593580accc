package audit

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/leasehold/leasehold/internal/auth"
)

// Policy is audit.k8s.io/v1 Policy: the first rule that matches a request
// sets its level; a request no rule matches is not recorded.
type Policy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Rules             []PolicyRule `json:"rules"`
	// OmitStages are stages never recorded, for every rule.
	OmitStages []Stage `json:"omitStages,omitempty"`
	// OmitManagedFields drops metadata.managedFields from recorded bodies.
	OmitManagedFields bool `json:"omitManagedFields,omitempty"`
}

// PolicyRule matches requests; empty lists match everything.
type PolicyRule struct {
	Level      Level    `json:"level"`
	Users      []string `json:"users,omitempty"`
	UserGroups []string `json:"userGroups,omitempty"`
	Verbs      []string `json:"verbs,omitempty"`
	// Resources match resource requests only.
	Resources []GroupResources `json:"resources,omitempty"`
	// Namespaces match resource requests only; "" matches cluster-scoped
	// ones.
	Namespaces []string `json:"namespaces,omitempty"`
	// NonResourceURLs match non-resource requests only: exact, or a prefix
	// ending in "*".
	NonResourceURLs   []string `json:"nonResourceURLs,omitempty"`
	OmitStages        []Stage  `json:"omitStages,omitempty"`
	OmitManagedFields *bool    `json:"omitManagedFields,omitempty"`
}

// GroupResources selects resources of one API group.
type GroupResources struct {
	// Group is the API group; "" is the core group, "*" any group.
	Group string `json:"group,omitempty"`
	// Resources: "leases", "leases/status", "*/status", "leases/*" or "*".
	// Empty matches every resource of the group.
	Resources []string `json:"resources,omitempty"`
	// ResourceNames restrict to named objects.
	ResourceNames []string `json:"resourceNames,omitempty"`
}

// DefaultPolicy records every request at Metadata level, without the
// RequestReceived stage: one line per request (two for watches).
func DefaultPolicy() *Policy {
	return &Policy{
		TypeMeta:   metav1.TypeMeta{APIVersion: APIVersion, Kind: "Policy"},
		OmitStages: []Stage{StageRequestReceived},
		Rules:      []PolicyRule{{Level: LevelMetadata}},
	}
}

// LoadPolicy reads and checks a policy file (YAML or JSON). A file that
// only strict decoding refuses (a field it does not know, misspelt or of a
// newer Kubernetes; a field given twice) is read leniently, with a warning
// on log, as kube-apiserver reads its policy file.
func LoadPolicy(path string, log *slog.Logger) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit policy: %w", err)
	}
	p, err := ParsePolicy(data)
	if err != nil {
		lenient, lerr := parsePolicy(data, func(data []byte, p any) error { return yaml.Unmarshal(data, p) })
		if lerr != nil {
			return nil, fmt.Errorf("audit policy %s: %w", path, err)
		}
		log.Warn("the audit policy holds what strict decoding refuses; it is read without it", "file", path, "err", err)
		p = lenient
	}
	return p, nil
}

// ParsePolicy decodes and validates a policy strictly: unknown fields are
// errors, so that a misspelt rule does not silently record nothing.
func ParsePolicy(data []byte) (*Policy, error) {
	return parsePolicy(data, func(data []byte, p any) error { return yaml.UnmarshalStrict(data, p) })
}

// parsePolicy decodes a policy with unmarshal and validates it.
func parsePolicy(data []byte, unmarshal func([]byte, any) error) (*Policy, error) {
	var p Policy
	if err := unmarshal(data, &p); err != nil {
		return nil, err
	}
	if p.APIVersion != APIVersion || p.Kind != "Policy" {
		return nil, fmt.Errorf("want apiVersion %s and kind Policy, got %q and %q", APIVersion, p.APIVersion, p.Kind)
	}
	if len(p.Rules) == 0 {
		return nil, fmt.Errorf("rules: at least one rule is required")
	}
	if err := validStages(p.OmitStages); err != nil {
		return nil, fmt.Errorf("omitStages: %w", err)
	}
	for i, r := range p.Rules {
		switch r.Level {
		case LevelNone, LevelMetadata, LevelRequest, LevelRequestResponse:
		default:
			return nil, fmt.Errorf("rules[%d].level: unsupported value %q", i, r.Level)
		}
		if len(r.NonResourceURLs) > 0 && (len(r.Resources) > 0 || len(r.Namespaces) > 0) {
			return nil, fmt.Errorf("rules[%d]: rules cannot apply to both regular resources and non-resource URLs", i)
		}
		for _, u := range r.NonResourceURLs {
			if !strings.HasPrefix(u, "/") && u != "*" {
				return nil, fmt.Errorf("rules[%d].nonResourceURLs: %q must start with /", i, u)
			}
			if strings.Contains(strings.TrimSuffix(u, "*"), "*") {
				return nil, fmt.Errorf("rules[%d].nonResourceURLs: %q may hold * only at its end", i, u)
			}
		}
		for j, gr := range r.Resources {
			for _, res := range gr.Resources {
				if res == "" || strings.Count(res, "/") > 1 {
					return nil, fmt.Errorf("rules[%d].resources[%d]: invalid resource %q", i, j, res)
				}
			}
			if len(gr.ResourceNames) > 0 && len(gr.Resources) == 0 {
				return nil, fmt.Errorf("rules[%d].resources[%d].resourceNames: requires resources", i, j)
			}
		}
		if err := validStages(r.OmitStages); err != nil {
			return nil, fmt.Errorf("rules[%d].omitStages: %w", i, err)
		}
	}
	return &p, nil
}

func validStages(ss []Stage) error {
	for _, s := range ss {
		switch s {
		case StageRequestReceived, StageResponseStarted, StageResponseComplete, StagePanic:
		default:
			return fmt.Errorf("unsupported stage %q", s)
		}
	}
	return nil
}

// Decision is what the policy says about one request. Its OmitStages may
// be the policy's own: read it, do not change it.
type Decision struct {
	Level             Level
	OmitStages        []Stage
	OmitManagedFields bool
}

// Records reports whether stage s is written.
func (d Decision) Records(s Stage) bool {
	return d.Level != LevelNone && !slices.Contains(d.OmitStages, s)
}

// Decide returns the level and omitted stages for a request.
func (p *Policy) Decide(a auth.Attributes) Decision {
	for i := range p.Rules {
		r := &p.Rules[i]
		if r.matches(a) {
			// A rule that omits no stage of its own shares the policy's
			// list (clipped, so that an append copies it) rather than a
			// copy on every request.
			omit := slices.Clip(p.OmitStages)
			if len(r.OmitStages) > 0 {
				omit = append(slices.Clone(p.OmitStages), r.OmitStages...)
			}
			d := Decision{Level: r.Level, OmitStages: omit, OmitManagedFields: p.OmitManagedFields}
			if r.OmitManagedFields != nil {
				d.OmitManagedFields = *r.OmitManagedFields
			}
			return d
		}
	}
	return Decision{Level: LevelNone}
}

func (r *PolicyRule) matches(a auth.Attributes) bool {
	if len(r.Users) > 0 && (a.User == nil || !slices.Contains(r.Users, a.User.Name)) {
		return false
	}
	if len(r.UserGroups) > 0 && !slices.ContainsFunc(r.UserGroups, a.User.InGroup) {
		return false
	}
	if len(r.Verbs) > 0 && !slices.Contains(r.Verbs, a.Verb) {
		return false
	}
	if len(r.Namespaces) > 0 || len(r.Resources) > 0 {
		if !a.ResourceRequest {
			return false
		}
		if len(r.Namespaces) > 0 && !slices.Contains(r.Namespaces, a.Namespace) {
			return false
		}
		if len(r.Resources) > 0 && !slices.ContainsFunc(r.Resources, func(g GroupResources) bool { return g.matches(a) }) {
			return false
		}
	}
	if len(r.NonResourceURLs) > 0 {
		if a.ResourceRequest {
			return false
		}
		return slices.ContainsFunc(r.NonResourceURLs, func(u string) bool {
			return u == "*" || u == a.Path || (strings.HasSuffix(u, "*") && strings.HasPrefix(a.Path, strings.TrimSuffix(u, "*")))
		})
	}
	return true
}

func (g *GroupResources) matches(a auth.Attributes) bool {
	if g.Group != a.APIGroup && g.Group != "*" {
		return false
	}
	if len(g.Resources) == 0 {
		return true
	}
	combined := a.Resource
	if a.Subresource != "" {
		combined += "/" + a.Subresource
	}
	for _, res := range g.Resources {
		switch {
		case res == "*", res == combined,
			a.Subresource != "" && res == "*/"+a.Subresource,
			res == a.Resource+"/*":
		default:
			continue
		}
		return len(g.ResourceNames) == 0 || slices.Contains(g.ResourceNames, a.Name)
	}
	return false
}
