package registry

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Nodes is v1 Node: the machines of the fleet. The agent creates each Node
// with its status; writes to the main resource keep the stored status and
// writes to /status keep the stored spec, as in Kubernetes.
var Nodes = &Resource{
	GroupVersion:      corev1.SchemeGroupVersion,
	Name:              "nodes",
	SingularName:      "node",
	Kind:              "Node",
	KubeFinalizers:    true,
	ShortNames:        []string{"no"},
	KeyPrefix:         "minions",
	StatusSubresource: true,
	New:               func() runtime.Object { return &corev1.Node{} },
	NewList:           func() runtime.Object { return &corev1.NodeList{} },
	PrepareForCreate: func(obj runtime.Object) {
		n := obj.(*corev1.Node)
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDRs(&n.Spec)
		// Deprecated with the kubelet's dynamic configuration, and dropped
		// as kube-apiserver drops them.
		n.Spec.ConfigSource, n.Status.Config = nil, nil
		defaultAllocatable(&n.Status)
	},
	PrepareForUpdate: func(obj, old runtime.Object) {
		n, o := obj.(*corev1.Node), old.(*corev1.Node)
		n.Status = o.Status
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDRs(&n.Spec)
		if o.Spec.ConfigSource == nil {
			n.Spec.ConfigSource = nil
		}
	},
	PrepareForStatusUpdate: func(obj, old runtime.Object) {
		n := obj.(*corev1.Node)
		n.Spec = old.(*corev1.Node).Spec
		defaultAllocatable(&n.Status)
	},
	ChangedFields: nodeChangedFields,
	SharedStrings: nodeSharedStrings,
	Validate:      func(obj runtime.Object) field.ErrorList { return validateNode(obj.(*corev1.Node)) },
	ValidateUpdate: func(obj, old runtime.Object) field.ErrorList {
		n, o := obj.(*corev1.Node), old.(*corev1.Node)
		errs := append(validateNode(n), duplicateAddresses(n)...)
		if len(errs) > 0 {
			// Ratcheting, as Kubernetes has it for rules it tightens: what
			// the stored Node already broke (written before a rule was
			// kept) does not hold back an update that leaves it so, such
			// as the node lifecycle controller's taint.
			had := append(validateNode(o), duplicateAddresses(o)...)
			errs = slices.DeleteFunc(errs, func(e *field.Error) bool {
				return slices.ContainsFunc(had, func(h *field.Error) bool { return h.Error() == e.Error() })
			})
		}
		return append(errs, validateNodeUpdate(n, o)...)
	},
	Warnings: func(obj runtime.Object) []string {
		if obj.(*corev1.Node).Spec.DoNotUseExternalID != "" {
			return []string{"spec.externalID: this field is deprecated, and is unused by Kubernetes"}
		}
		return nil
	},
	AllowCreateOnUpdate: false,
	// A write without a resourceVersion goes over the stored Node, as
	// kube-apiserver lets it (kubectl replace, a repeated server-side apply).
	AllowUnconditionalUpdate: true,
	Columns: []metav1.TableColumnDefinition{
		{Name: "Status", Type: "string", Description: "The status of the node"},
		{Name: "Roles", Type: "string", Description: "The roles of the node"},
		AgeColumn,
		{Name: "Version", Type: "string", Description: corev1.NodeSystemInfo{}.SwaggerDoc()["kubeletVersion"]},
		{Name: "Internal-IP", Type: "string", Priority: 1, Description: corev1.NodeStatus{}.SwaggerDoc()["addresses"]},
		{Name: "External-IP", Type: "string", Priority: 1, Description: corev1.NodeStatus{}.SwaggerDoc()["addresses"]},
		{Name: "OS-Image", Type: "string", Priority: 1, Description: corev1.NodeSystemInfo{}.SwaggerDoc()["osImage"]},
		{Name: "Kernel-Version", Type: "string", Priority: 1, Description: corev1.NodeSystemInfo{}.SwaggerDoc()["kernelVersion"]},
		{Name: "Container-Runtime", Type: "string", Priority: 1, Description: corev1.NodeSystemInfo{}.SwaggerDoc()["containerRuntimeVersion"]},
	},
	Cells: func(obj runtime.Object, now time.Time) []interface{} {
		n := obj.(*corev1.Node)
		info := n.Status.NodeInfo
		return []interface{}{
			NodeStatus(n), nodeRoles(n), Age(n.CreationTimestamp, now), info.KubeletVersion,
			nodeAddress(n, corev1.NodeInternalIP), nodeAddress(n, corev1.NodeExternalIP),
			orUnknown(info.OSImage), orUnknown(info.KernelVersion), orUnknown(info.ContainerRuntimeVersion),
		}
	},
	SelectableFields: func(obj runtime.Object) map[string]string {
		return map[string]string{"spec.unschedulable": fmt.Sprint(obj.(*corev1.Node).Spec.Unschedulable)}
	},
}

func init() { register(Nodes) }

// defaultAllocatable gives a status with a capacity and no allocatable
// resources the capacity as its allocatable, as Kubernetes' defaults for
// a Node's status do.
func defaultAllocatable(s *corev1.NodeStatus) {
	if s.Allocatable == nil && s.Capacity != nil {
		s.Allocatable = s.Capacity.DeepCopy()
	}
}

// NodeStatus is the STATUS column: Ready, NotReady or Unknown, and
// SchedulingDisabled when cordoned.
func NodeStatus(n *corev1.Node) string {
	var status []string
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				status = append(status, "Ready")
			} else {
				status = append(status, "NotReady")
			}
		}
	}
	if len(status) == 0 {
		status = append(status, "Unknown")
	}
	if n.Spec.Unschedulable {
		status = append(status, "SchedulingDisabled")
	}
	return strings.Join(status, ",")
}

// nodeRoles lists roles from node-role.kubernetes.io/<role> labels and the
// older kubernetes.io/role label.
func nodeRoles(n *corev1.Node) string {
	set := map[string]bool{}
	for k, v := range n.Labels {
		switch {
		case strings.HasPrefix(k, "node-role.kubernetes.io/"):
			if role := strings.TrimPrefix(k, "node-role.kubernetes.io/"); role != "" {
				set[role] = true
			}
		case k == "kubernetes.io/role" && v != "":
			set[v] = true
		}
	}
	if len(set) == 0 {
		return "<none>"
	}
	roles := make([]string, 0, len(set))
	for r := range set {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	return strings.Join(roles, ",")
}

func nodeAddress(n *corev1.Node, t corev1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return "<none>"
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

var taintEffects = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}

// validateNode checks what leasehold's users set on Nodes: taints (key,
// value, effect, no duplicate key and effect), pod CIDRs, resource
// quantities and addresses.
func validateNode(n *corev1.Node) field.ErrorList {
	var errs field.ErrorList
	if len(n.Spec.Taints) > 0 {
		errs = validateTaints(n.Spec.Taints)
	}
	errs = append(errs, validatePodCIDRs(n.Spec.PodCIDRs)...)
	// Quantities that are not negative, and whole for what is counted, as
	// kube-apiserver has them (and its paths, status.capacity.memory).
	for _, l := range []struct {
		name string
		list corev1.ResourceList
	}{{"capacity", n.Status.Capacity}, {"allocatable", n.Status.Allocatable}} {
		if len(l.list) == 0 {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(l.list)) {
			q := l.list[name]
			if q.Sign() < 0 {
				errs = append(errs, field.Invalid(field.NewPath("status", l.name, string(name)), q.String(), apivalidation.IsNegativeErrorMsg))
			}
			if countedResource(name) && q.MilliValue()%1000 != 0 {
				errs = append(errs, field.Invalid(field.NewPath("status", l.name, string(name)), q, "must be an integer"))
			}
		}
	}
	// Addresses are not checked one by one: kube-apiserver leaves a type
	// or an address out as the client sent it (duplicateAddresses refuses
	// a repeated one on update).
	return errs
}

// validateTaints checks taints as kube-apiserver does: key, value and
// effect, and no key twice with one effect.
func validateTaints(ts []corev1.Taint) field.ErrorList {
	var errs field.ErrorList
	// kube-apiserver reports a taint's errors under metadata.taints, not
	// where the taints are; clients see that path, so it is kept.
	taints := field.NewPath("metadata", "taints")
	seen := make(map[string]bool, len(ts))
	for i, t := range ts {
		p := taints.Index(i)
		for _, msg := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, field.Invalid(p.Child("key"), t.Key, msg))
		}
		if msgs := validation.IsValidLabelValue(t.Value); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("value"), t.Value, strings.Join(msgs, ";")))
		}
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		case "":
			errs = append(errs, field.Required(p.Child("effect"), ""))
		default:
			errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect, taintEffects))
		}
		id := t.Key + "\x00" + string(t.Effect)
		if seen[id] {
			dup := field.Duplicate(p, t)
			dup.Detail = "taints must be unique by key and effect pair"
			errs = append(errs, dup)
		}
		seen[id] = true
	}
	return errs
}

// countedResources are the resources of the core namespace that come in
// whole numbers.
var countedResources = []corev1.ResourceName{
	corev1.ResourcePods, corev1.ResourceQuotas, corev1.ResourceServices, corev1.ResourceReplicationControllers,
	corev1.ResourceSecrets, corev1.ResourceConfigMaps, corev1.ResourcePersistentVolumeClaims,
	corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers,
}

// countedResource reports whether a quantity of name must be whole, as
// kube-apiserver decides it: one of countedResources, or an extended
// resource (a qualified name with a domain other than kubernetes.io's,
// such as example.com/gpu, that may also be requested in a quota).
func countedResource(name corev1.ResourceName) bool {
	if slices.Contains(countedResources, name) {
		return true
	}
	s := string(name)
	if !strings.Contains(s, "/") || strings.Contains(s, corev1.ResourceDefaultNamespacePrefix) || strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+s)) == 0
}

// validatePodCIDRs checks spec.podCIDRs as kube-apiserver does: each a
// CIDR (its lenient rules for this field, which predates strict ones), and
// two at most, of different IP families.
func validatePodCIDRs(cidrs []string) field.ErrorList {
	if len(cidrs) == 0 {
		return nil
	}
	path := field.NewPath("spec", "podCIDRs")
	var errs field.ErrorList
	for i, c := range cidrs {
		errs = append(errs, validation.IsValidCIDRForLegacyField(path.Index(i), c, false, nil)...)
	}
	if len(cidrs) < 2 {
		return errs
	}
	if dual, err := netutils.IsDualStackCIDRStrings(cidrs); err == nil && (!dual || len(cidrs) > 2) {
		errs = append(errs, field.Invalid(path, cidrs, "may specify no more than one CIDR for each IP family"))
	}
	for i, c := range cidrs {
		if slices.Contains(cidrs[:i], c) {
			errs = append(errs, field.Duplicate(path.Index(i), c))
		}
	}
	return errs
}

// podCIDRs gives a spec's podCIDR and podCIDRs as kube-apiserver stores
// them: podCIDR, when set, is the first of podCIDRs (a podCIDRs that
// starts otherwise gives way to it, for older clients), and podCIDR is the
// first of podCIDRs when only they are set.
func podCIDRs(spec *corev1.NodeSpec) (string, []string) {
	cidr, cidrs := spec.PodCIDR, spec.PodCIDRs
	if cidr != "" && (len(cidrs) == 0 || cidrs[0] != cidr) {
		cidrs = []string{cidr}
	}
	if len(cidrs) > 0 {
		cidr = cidrs[0]
	}
	return cidr, cidrs
}

// cidrsOf gives a spec's podCIDRs as kube-apiserver would store them.
func cidrsOf(spec *corev1.NodeSpec) []string {
	_, cidrs := podCIDRs(spec)
	return cidrs
}

// duplicateAddresses refuses an address listed twice, as kube-apiserver
// does on update.
func duplicateAddresses(n *corev1.Node) field.ErrorList {
	var errs field.ErrorList
	for i, a := range n.Status.Addresses {
		if slices.Contains(n.Status.Addresses[:i], a) {
			errs = append(errs, field.Duplicate(field.NewPath("status", "addresses").Index(i), a))
		}
	}
	return errs
}

// validateNodeUpdate adds kube-apiserver's checks of a Node against the
// stored one: the pod CIDRs and the provider ID are set once and then kept
// (a controller may fill them in), and externalID is never changed.
func validateNodeUpdate(n, old *corev1.Node) field.ErrorList {
	var errs field.ErrorList
	// Both as stored now: a Node stored before podCIDRs was kept in step
	// may have podCIDR alone, and an update of its status keeps its spec.
	if was := cidrsOf(&old.Spec); len(was) > 0 && !slices.Equal(was, cidrsOf(&n.Spec)) {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "podCIDRs"), `node updates may not change podCIDR except from "" to valid`))
	}
	if old.Spec.ProviderID != "" && n.Spec.ProviderID != old.Spec.ProviderID {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "providerID"), `node updates may not change providerID except from "" to valid`))
	}
	if n.Spec.DoNotUseExternalID != old.Spec.DoNotUseExternalID {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "externalID"), "may not be updated"))
	}
	return errs
}

// nodeChangedFields recognises an agent's periodic status post, which
// differs from the stored Node in its conditions' lastHeartbeatTime only
// (every 5 minutes per node, as often as the renewals of a fleet whose
// leases renew every 5 minutes). It lists the changed heartbeats; anything
// else declines.
func nodeChangedFields(obj, old runtime.Object) ([][]string, bool) {
	n, o := obj.(*corev1.Node), old.(*corev1.Node)
	if !SameMetadata(&n.ObjectMeta, &o.ObjectMeta) || len(n.Status.Conditions) != len(o.Status.Conditions) {
		return nil, false
	}
	var paths [][]string
	for i := range n.Status.Conditions {
		c, oc := &n.Status.Conditions[i], &o.Status.Conditions[i]
		if c.Type != oc.Type || c.Status != oc.Status || c.Reason != oc.Reason || c.Message != oc.Message ||
			!c.LastTransitionTime.Equal(&oc.LastTransitionTime) {
			return nil, false
		}
		if c.LastHeartbeatTime.Equal(&oc.LastHeartbeatTime) {
			continue
		}
		key, err := fieldpath.SerializePathElement(fieldpath.PathElement{Key: fieldpath.KeyByFields("type", string(c.Type))})
		if c.LastHeartbeatTime.IsZero() || err != nil { // unset: the full computation
			return nil, false
		}
		paths = append(paths, []string{"f:status", "f:conditions", key, "f:lastHeartbeatTime"})
	}
	ns, os := n.Status, o.Status
	ns.Conditions, os.Conditions = nil, nil
	if !equality.Semantic.DeepEqual(&n.Spec, &o.Spec) || !equality.Semantic.DeepEqual(&ns, &os) {
		return nil, false
	}
	return paths, true
}

// nodeSharedStrings names what a fleet's Nodes mostly have in common: the
// conditions' types, statuses, reasons and messages, the addresses' types,
// taints, and the OS, kernel and versions (not the machine, system and
// boot IDs, which are each machine's own). With the managedFields and owner
// strings the store shares for every kind, 18 MB of the heap at 100 000
// nodes and leases. An address that is the node's name (its Hostname
// address, as agents report it) shares the name.
func nodeSharedStrings(obj runtime.Object, str, named func(*string)) {
	n := obj.(*corev1.Node)
	for i := range n.Status.Conditions {
		c := &n.Status.Conditions[i]
		str((*string)(&c.Type))
		str((*string)(&c.Status))
		str(&c.Reason)
		str(&c.Message)
	}
	for i := range n.Status.Addresses {
		str((*string)(&n.Status.Addresses[i].Type))
		named(&n.Status.Addresses[i].Address)
	}
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		str(&t.Key)
		str(&t.Value)
		str((*string)(&t.Effect))
	}
	info := &n.Status.NodeInfo
	for _, p := range []*string{&info.KernelVersion, &info.OSImage, &info.ContainerRuntimeVersion,
		&info.KubeletVersion, &info.KubeProxyVersion, &info.OperatingSystem, &info.Architecture} {
		str(p)
	}
}
