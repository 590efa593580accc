package coordinator

import (
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	"k8s.io/apimachinery/pkg/util/version"
)

// strategyOf returns the strategy the candidates of one Lease ask for: that
// of the candidates with the highest binary version (the newest code decides
// how the election is run, as in Kubernetes). It fails when candidates at
// that version disagree.
func strategyOf(cands []*coordinationv1beta1.LeaseCandidate) (coordinationv1.CoordinatedLeaseStrategy, error) {
	var (
		strategy coordinationv1.CoordinatedLeaseStrategy
		from     string
		highest  *version.Version
	)
	for _, c := range cands {
		bv := parseOrZero(c.Spec.BinaryVersion)
		switch {
		case highest == nil || highest.LessThan(bv):
			highest, strategy, from = bv, c.Spec.Strategy, c.Name
		case highest.EqualTo(bv) && c.Spec.Strategy != strategy:
			return "", fmt.Errorf("candidates %q and %q have binary version %s but strategies %q and %q", from, c.Name, bv, strategy, c.Spec.Strategy)
		}
	}
	return strategy, nil
}

// eligible reports whether c can be elected under OldestEmulationVersion:
// both versions must parse.
func eligible(c *coordinationv1beta1.LeaseCandidate) bool {
	_, err1 := version.Parse(c.Spec.EmulationVersion)
	_, err2 := version.Parse(c.Spec.BinaryVersion)
	return err1 == nil && err2 == nil
}

// better reports whether a should lead rather than b under
// OldestEmulationVersion: the lower emulation version, then the lower
// binary version, then the older candidate (creationTimestamp), then the
// lower name (so the choice never depends on the order of a list).
func better(a, b *coordinationv1beta1.LeaseCandidate) bool {
	if c := compareVersions(a.Spec.EmulationVersion, b.Spec.EmulationVersion); c != 0 {
		return c < 0
	}
	if c := compareVersions(a.Spec.BinaryVersion, b.Spec.BinaryVersion); c != 0 {
		return c < 0
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return strings.Compare(a.Name, b.Name) < 0
}

// best returns the candidate OldestEmulationVersion elects among cands
// (nil when none is eligible).
func best(cands []*coordinationv1beta1.LeaseCandidate) *coordinationv1beta1.LeaseCandidate {
	var pick *coordinationv1beta1.LeaseCandidate
	for _, c := range cands {
		if eligible(c) && (pick == nil || better(c, pick)) {
			pick = c
		}
	}
	return pick
}

var zeroVersion = version.MajorMinor(0, 0)

// parseOrZero parses a semantic (or generic) version; an unparsable one
// counts as 0.0.
func parseOrZero(s string) *version.Version {
	v, err := version.Parse(s)
	if err != nil {
		return zeroVersion
	}
	return v
}

// compareVersions returns -1, 0 or 1 as version a is lower than, equal to
// or higher than b.
func compareVersions(a, b string) int {
	va, vb := parseOrZero(a), parseOrZero(b)
	switch {
	case va.LessThan(vb):
		return -1
	case vb.LessThan(va):
		return 1
	}
	return 0
}
