package nodelifecycle

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestExpired(t *testing.T) {
	grace := 50 * time.Second
	tests := []struct {
		name  string
		probe time.Time
		now   time.Time
		want  bool
	}{
		{"just seen", t0, t0, false},
		{"just under grace", t0, t0.Add(grace - time.Nanosecond), false},
		{"exactly grace", t0, t0.Add(grace), false},
		{"just over grace", t0, t0.Add(grace + time.Nanosecond), true},
		{"long silent", t0, t0.Add(time.Hour), true},
		{"clock behind the probe", t0, t0.Add(-time.Hour), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := expired(tt.probe, grace, tt.now); got != tt.want {
				t.Errorf("expired(probe, %v, probe%+v) = %v, want %v", grace, tt.now.Sub(tt.probe), got, tt.want)
			}
		})
	}
}

func cond(typ corev1.NodeConditionType, status corev1.ConditionStatus, reason string) corev1.NodeCondition {
	return corev1.NodeCondition{
		Type: typ, Status: status, Reason: reason,
		LastHeartbeatTime:  metav1.NewTime(t0.Add(-time.Minute)),
		LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour)),
	}
}

func TestMarkUnknown(t *testing.T) {
	now := t0.Add(time.Minute)
	created := metav1.NewTime(t0.Add(-24 * time.Hour))
	tests := []struct {
		name        string
		conds       []corev1.NodeCondition
		wantChanged bool
		want        map[corev1.NodeConditionType]string // status/reason
	}{
		{
			name: "ready node",
			conds: []corev1.NodeCondition{
				cond(corev1.NodeReady, corev1.ConditionTrue, "AgentReady"),
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "Fine"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "Fine"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "Fine"),
				cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated"),
			},
			wantChanged: true,
			want: map[corev1.NodeConditionType]string{
				corev1.NodeReady:              "Unknown/" + ReasonNodeStatusUnknown,
				corev1.NodeMemoryPressure:     "Unknown/" + ReasonNodeStatusUnknown,
				corev1.NodeDiskPressure:       "Unknown/" + ReasonNodeStatusUnknown,
				corev1.NodePIDPressure:        "Unknown/" + ReasonNodeStatusUnknown,
				corev1.NodeNetworkUnavailable: "False/RouteCreated",
			},
		},
		{
			name:        "not ready node, without pressure conditions",
			conds:       []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionFalse, "AgentNotReady")},
			wantChanged: true,
			want: map[corev1.NodeConditionType]string{
				corev1.NodeReady:          "Unknown/" + ReasonNodeStatusUnknown,
				corev1.NodeMemoryPressure: "Unknown/" + ReasonNodeStatusNeverUpdated,
				corev1.NodeDiskPressure:   "Unknown/" + ReasonNodeStatusNeverUpdated,
				corev1.NodePIDPressure:    "Unknown/" + ReasonNodeStatusNeverUpdated,
			},
		},
		{
			name: "already unknown",
			conds: []corev1.NodeCondition{
				cond(corev1.NodeReady, corev1.ConditionUnknown, "SomethingElse"),
				cond(corev1.NodeMemoryPressure, corev1.ConditionUnknown, "SomethingElse"),
				cond(corev1.NodeDiskPressure, corev1.ConditionUnknown, "SomethingElse"),
				cond(corev1.NodePIDPressure, corev1.ConditionUnknown, "SomethingElse"),
			},
			wantChanged: false,
			want: map[corev1.NodeConditionType]string{
				corev1.NodeReady:          "Unknown/SomethingElse",
				corev1.NodeMemoryPressure: "Unknown/SomethingElse",
				corev1.NodeDiskPressure:   "Unknown/SomethingElse",
				corev1.NodePIDPressure:    "Unknown/SomethingElse",
			},
		},
		{
			name:        "never reported",
			wantChanged: true,
			want: map[corev1.NodeConditionType]string{
				corev1.NodeReady:          "Unknown/" + ReasonNodeStatusNeverUpdated,
				corev1.NodeMemoryPressure: "Unknown/" + ReasonNodeStatusNeverUpdated,
				corev1.NodeDiskPressure:   "Unknown/" + ReasonNodeStatusNeverUpdated,
				corev1.NodePIDPressure:    "Unknown/" + ReasonNodeStatusNeverUpdated,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", CreationTimestamp: created}}
			n.Status.Conditions = tt.conds
			if got := markUnknown(n, now); got != tt.wantChanged {
				t.Errorf("markUnknown changed = %v, want %v", got, tt.wantChanged)
			}
			if len(n.Status.Conditions) != len(tt.want) {
				t.Fatalf("got %d conditions, want %d", len(n.Status.Conditions), len(tt.want))
			}
			for _, c := range n.Status.Conditions {
				if got := string(c.Status) + "/" + c.Reason; got != tt.want[c.Type] {
					t.Errorf("%s: got %s, want %s", c.Type, got, tt.want[c.Type])
				}
				changedNow := tt.wantChanged && c.Reason != "RouteCreated" && c.Reason != "SomethingElse"
				if changedNow && !c.LastTransitionTime.Time.Equal(now) {
					t.Errorf("%s: lastTransitionTime %v, want %v", c.Type, c.LastTransitionTime, now)
				}
				switch {
				case c.Reason == ReasonNodeStatusNeverUpdated:
					if !c.LastHeartbeatTime.Equal(&created) {
						t.Errorf("%s: lastHeartbeatTime %v, want the creation time %v", c.Type, c.LastHeartbeatTime, created)
					}
				case !c.LastHeartbeatTime.Time.Equal(t0.Add(-time.Minute)):
					t.Errorf("%s: lastHeartbeatTime %v changed, want it kept", c.Type, c.LastHeartbeatTime)
				}
			}
		})
	}
}

func TestMarkRenewed(t *testing.T) {
	now := t0.Add(time.Minute)
	tests := []struct {
		name        string
		conds       []corev1.NodeCondition
		wantChanged bool
		wantReady   string
	}{
		{"unknown", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionUnknown, ReasonNodeStatusUnknown)}, true, "True/" + ReasonNodeLeaseRenewed},
		{"already ready", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionTrue, "AgentReady")}, false, "True/AgentReady"},
		{"not ready is the agent's word", []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionFalse, "AgentNotReady")}, false, "False/AgentNotReady"},
		{"no ready condition", nil, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &corev1.Node{}
			n.Status.Conditions = tt.conds
			if got := markRenewed(n, now); got != tt.wantChanged {
				t.Errorf("markRenewed changed = %v, want %v", got, tt.wantChanged)
			}
			got := ""
			if c := readyCondition(n); c != nil {
				got = string(c.Status) + "/" + c.Reason
				if tt.wantChanged && (!c.LastTransitionTime.Time.Equal(now) || !c.LastHeartbeatTime.Time.Equal(now)) {
					t.Errorf("times %v/%v, want %v", c.LastHeartbeatTime, c.LastTransitionTime, now)
				}
			}
			if got != tt.wantReady {
				t.Errorf("Ready %q, want %q", got, tt.wantReady)
			}
		})
	}
}

func taint(key string, effect corev1.TaintEffect) corev1.Taint {
	return corev1.Taint{Key: key, Effect: effect}
}

func TestReconcileTaints(t *testing.T) {
	now := t0.Add(time.Minute)
	earlier := metav1.NewTime(t0)
	user := corev1.Taint{Key: "example.com/dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}
	unreachableNoExec := corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &earlier}
	notReadyNoExec := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute, TimeAdded: &earlier}
	const (
		unreachableNS = "node.kubernetes.io/unreachable:NoSchedule"
		unreachableNE = "node.kubernetes.io/unreachable:NoExecute"
		notReadyNS    = "node.kubernetes.io/not-ready:NoSchedule"
		notReadyNE    = "node.kubernetes.io/not-ready:NoExecute"
		userNS        = "example.com/dedicated:NoSchedule"
		unschedNS     = "node.kubernetes.io/unschedulable:NoSchedule"
	)
	tests := []struct {
		name        string
		taints      []corev1.Taint
		ready       corev1.ConditionStatus
		ne          noExecute
		wantChanged bool
		want        []string // key:effect in order
	}{
		{"ready, untainted", []corev1.Taint{user}, corev1.ConditionTrue, noExecuteHold, false, []string{userNS}},
		{"unknown adds unreachable NoSchedule alone", []corev1.Taint{user}, corev1.ConditionUnknown, noExecuteHold, true, []string{userNS, unreachableNS}},
		{"unknown, granted, adds both", []corev1.Taint{user}, corev1.ConditionUnknown, noExecuteAdd, true, []string{userNS, unreachableNS, unreachableNE}},
		{"unknown, granted, adds NoExecute", []corev1.Taint{taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule)}, corev1.ConditionUnknown, noExecuteAdd, true, []string{unreachableNS, unreachableNE}},
		{"unknown, all zones down, adds NoSchedule alone", nil, corev1.ConditionUnknown, noExecuteDrop, true, []string{unreachableNS}},
		{"unknown, all zones down, drops NoExecute", []corev1.Taint{taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule), unreachableNoExec, user}, corev1.ConditionUnknown, noExecuteDrop, true, []string{unreachableNS, userNS}},
		{"unknown completes unreachable", []corev1.Taint{unreachableNoExec}, corev1.ConditionUnknown, noExecuteHold, true, []string{unreachableNE, unreachableNS}},
		{"unknown, already tainted", []corev1.Taint{taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule), unreachableNoExec}, corev1.ConditionUnknown, noExecuteHold, false, []string{unreachableNS, unreachableNE}},
		{"unknown, already tainted, granted", []corev1.Taint{taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule), unreachableNoExec}, corev1.ConditionUnknown, noExecuteAdd, false, []string{unreachableNS, unreachableNE}},
		{"ready removes unreachable", []corev1.Taint{taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule), user, unreachableNoExec}, corev1.ConditionTrue, noExecuteHold, true, []string{userNS}},
		{"ready removes all", []corev1.Taint{taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule), unreachableNoExec}, corev1.ConditionTrue, noExecuteHold, true, nil},
		{"false swaps unreachable for not-ready at once", []corev1.Taint{unreachableNoExec}, corev1.ConditionFalse, noExecuteHold, true, []string{notReadyNS, notReadyNE}},
		{"unknown swaps not-ready for unreachable at once", []corev1.Taint{taint(corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule), notReadyNoExec}, corev1.ConditionUnknown, noExecuteHold, true, []string{unreachableNS, unreachableNE}},
		{"false without NoExecute waits", []corev1.Taint{taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule)}, corev1.ConditionFalse, noExecuteHold, true, []string{notReadyNS}},
		{"duplicates dropped", []corev1.Taint{unreachableNoExec, unreachableNoExec, taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule)}, corev1.ConditionUnknown, noExecuteHold, true, []string{unreachableNE, unreachableNS}},
		{"no ready condition leaves taints", []corev1.Taint{unreachableNoExec}, "", noExecuteDrop, false, []string{unreachableNE}},
		{"cordoned", nil, corev1.ConditionTrue, noExecuteHold, true, []string{unschedNS}},
		{"cordoned, already tainted", []corev1.Taint{taint(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)}, corev1.ConditionTrue, noExecuteHold, false, []string{unschedNS}},
		{"cordoned and unknown", []corev1.Taint{user}, corev1.ConditionUnknown, noExecuteHold, true, []string{userNS, unreachableNS, unschedNS}},
		{"cordoned without a Ready condition", []corev1.Taint{unreachableNoExec}, "", noExecuteHold, true, []string{unreachableNE, unschedNS}},
		{"uncordoned", []corev1.Taint{taint(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule), user}, corev1.ConditionTrue, noExecuteHold, true, []string{userNS}},
		{"an unschedulable taint of another effect is not the controller's", []corev1.Taint{taint(corev1.TaintNodeUnschedulable, corev1.TaintEffectPreferNoSchedule)}, corev1.ConditionTrue, noExecuteHold, false, []string{"node.kubernetes.io/unschedulable:PreferNoSchedule"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &corev1.Node{}
			n.Spec.Taints = append([]corev1.Taint(nil), tt.taints...)
			n.Spec.Unschedulable = strings.HasPrefix(tt.name, "cordoned")
			if got := reconcileTaints(n, tt.ready, now, tt.ne); got != tt.wantChanged {
				t.Errorf("changed = %v, want %v", got, tt.wantChanged)
			}
			var got []string
			for _, tn := range n.Spec.Taints {
				got = append(got, tn.Key+":"+string(tn.Effect))
				// A taint the controller added carries the time it did, as
				// in Kubernetes; one it kept, what it had.
				kept := slices.ContainsFunc(tt.taints, func(in corev1.Taint) bool { return in.MatchTaint(&tn) })
				switch {
				case kept:
				case tn.TimeAdded == nil:
					t.Errorf("%s:%s added without timeAdded", tn.Key, tn.Effect)
				case !tn.TimeAdded.Time.Equal(now):
					t.Errorf("%s:%s timeAdded %v, want %v", tn.Key, tn.Effect, tn.TimeAdded, now)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("taints %v, want %v", got, tt.want)
			}
		})
	}
}

// TestConditionTaints: the NoSchedule taints of conditions other than
// Ready follow them, as Kubernetes' TaintNodesByCondition does; only True
// calls for one.
func TestConditionTaints(t *testing.T) {
	now := t0.Add(time.Minute)
	n := &corev1.Node{}
	n.Status.Conditions = []corev1.NodeCondition{
		cond(corev1.NodeReady, corev1.ConditionTrue, "Fine"),
		cond(corev1.NodeMemoryPressure, corev1.ConditionTrue, "Low"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "Fine"),
		cond(corev1.NodePIDPressure, corev1.ConditionUnknown, "Unknown"),
		cond(corev1.NodeNetworkUnavailable, corev1.ConditionTrue, "NoRoute"),
	}
	keys := func() []string {
		var got []string
		for _, tn := range n.Spec.Taints {
			got = append(got, tn.Key+":"+string(tn.Effect))
		}
		return got
	}
	if !mayNeedTaints(n) || !reconcileTaints(n, corev1.ConditionTrue, now, noExecuteHold) {
		t.Fatal("no taint for MemoryPressure and NetworkUnavailable True")
	}
	if want := []string{"node.kubernetes.io/memory-pressure:NoSchedule", "node.kubernetes.io/network-unavailable:NoSchedule"}; !slices.Equal(keys(), want) {
		t.Errorf("taints %v, want %v", keys(), want)
	}
	if reconcileTaints(n, corev1.ConditionTrue, now, noExecuteHold) {
		t.Error("a second reconcile changed the taints again")
	}
	// The summary a pass reads when the feed keeps no nodes agrees: these
	// taints match, and none would not. (It had judged the taints after
	// setting the pressure conditions Unknown on its scratch copy.)
	if sum := stateOfNode(n, false).sum; !sum.taintsMatch {
		t.Error("the summary of a node with its pressure taints says they do not match")
	}
	if sum := stateOfNode(&corev1.Node{Status: n.Status}, false).sum; sum.taintsMatch {
		t.Error("the summary of a node under memory pressure without its taint says the taints match")
	}
	n.Status.Conditions[1].Status = corev1.ConditionFalse
	n.Status.Conditions[4].Status = corev1.ConditionFalse
	if !mayNeedTaints(n) || !reconcileTaints(n, corev1.ConditionTrue, now, noExecuteHold) || len(n.Spec.Taints) != 0 {
		t.Errorf("taints %v once the conditions are False, want none", keys())
	}
	if mayNeedTaints(n) {
		t.Error("a Ready node without conditions calling for taints, or taints, may need taints")
	}
}
