package cli

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"
	// client-go's metrics of its requests and of its work queues, under
	// Kubernetes' names, labels and buckets (rest_client_*, workqueue_*),
	// as kube-apiserver, kube-controller-manager and the kubelet serve
	// them: these packages register them in component-base's registry.
	_ "k8s.io/component-base/metrics/prometheus/restclient"
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

// clientMetrics gathers client-go's series (rest_client_*, workqueue_*)
// from component-base's registry, and nothing else of it: its Go and
// process collectors are the process's own registry's too.
var clientMetrics prometheus.Gatherer = prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
	all, err := legacyregistry.DefaultGatherer.Gather()
	var kept []*dto.MetricFamily
	for _, mf := range all {
		if name := mf.GetName(); strings.HasPrefix(name, "rest_client_") || strings.HasPrefix(name, "workqueue_") {
			kept = append(kept, mf)
		}
	}
	return kept, err
})
