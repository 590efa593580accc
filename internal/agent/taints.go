package agent

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ParseTaints reads a --register-with-taints value, as the kubelet's:
// comma-separated KEY=VALUE:EFFECT or KEY:EFFECT, EFFECT one of
// NoSchedule, PreferNoSchedule and NoExecute.
func ParseTaints(s string) ([]corev1.Taint, error) {
	var out []corev1.Taint
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		kv, effect, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("taint %q: want KEY=VALUE:EFFECT or KEY:EFFECT", item)
		}
		key, value, _ := strings.Cut(kv, "=")
		t := corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)}
		if err := checkTaint(t); err != nil {
			return nil, fmt.Errorf("taint %q: %w", item, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// checkTaint checks a taint as the API server's validation does.
func checkTaint(t corev1.Taint) error {
	if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
		return fmt.Errorf("key %q: %s", t.Key, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
		return fmt.Errorf("value %q: %s", t.Value, strings.Join(errs, "; "))
	}
	switch t.Effect {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		return nil
	}
	return fmt.Errorf("effect %q is not NoSchedule, PreferNoSchedule or NoExecute", t.Effect)
}
