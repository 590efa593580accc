package agent

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The node's capacity and allocatable, as the kubelet posts them
// (Config.ReportCapacity), for the resources the agent can tell: cpu (the CPUs it may run on), memory
// (MemTotal) and ephemeral-storage (the root file system). Allocatable is
// capacity less the hard eviction threshold of memory.available and of
// nodefs.available, as the kubelet subtracts them; the agent reserves
// nothing else (the kubelet's --kube-reserved and --system-reserved). No
// pods figure: leasehold runs none. What the host does not say is left
// out.

// evictionResource is the resource whose allocatable each signal's
// threshold lowers.
var evictionResource = map[string]corev1.ResourceName{
	SignalMemoryAvailable: corev1.ResourceMemory,
	SignalNodeFsAvailable: corev1.ResourceEphemeralStorage,
}

// nodeResources returns the capacity and allocatable of a host measured as
// h, under the hard eviction thresholds.
func nodeResources(h HostStats, thresholds []Threshold) (capacity, allocatable corev1.ResourceList) {
	capacity = corev1.ResourceList{}
	if h.CPUs > 0 {
		capacity[corev1.ResourceCPU] = *resource.NewQuantity(h.CPUs, resource.DecimalSI)
	}
	if h.MemoryCapacity > 0 {
		capacity[corev1.ResourceMemory] = *resource.NewQuantity(h.MemoryCapacity, resource.BinarySI)
	}
	if h.FsCapacity > 0 {
		capacity[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(h.FsCapacity, resource.BinarySI)
	}
	if len(capacity) == 0 {
		return nil, nil
	}
	allocatable = capacity.DeepCopy()
	for _, t := range thresholds {
		name, ok := evictionResource[t.Signal]
		q, has := allocatable[name]
		if !ok || !has {
			continue
		}
		left := q.Value() - t.amount(q.Value())
		allocatable[name] = *resource.NewQuantity(max(left, 0), resource.BinarySI)
	}
	return capacity, allocatable
}

// amount is the threshold's quantity, or its percent of capacity.
func (t Threshold) amount(capacity int64) int64 {
	if t.Quantity != nil {
		return t.Quantity.Value()
	}
	return int64(float64(capacity) * t.Percent / 100)
}

// HostResources returns the capacity and allocatable the agent posts for a
// host measured as h, with the default eviction thresholds. leasehold
// bench's virtual agents post these with --report-capacity.
func HostResources(h HostStats) (capacity, allocatable corev1.ResourceList) {
	thresholds, err := ParseThresholds(DefaultEvictionHard)
	if err != nil {
		panic(err) // a constant
	}
	return nodeResources(h, thresholds)
}
