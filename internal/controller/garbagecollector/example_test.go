package garbagecollector_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/leasehold/leasehold/internal/controller/garbagecollector"
)

// The collector runs beside the API server as a client of it, with
// credentials for garbagecollector.UserName, and exports its metrics.
func Example() {
	cfg := &rest.Config{
		Host:        "https://127.0.0.1:6443",
		BearerToken: os.Getenv("GC_TOKEN"), // a token for garbagecollector.UserName
	}
	gc, err := garbagecollector.New(garbagecollector.Config{REST: cfg})
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(gc.Collectors()...)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := gc.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
