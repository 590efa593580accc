package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/tick"
)

// How often each member of an external cluster is asked whether it
// answers, and how long it has to.
const (
	memberProbeInterval = time.Second
	memberProbeTimeout  = time.Second
)

// followAnswering keeps c's endpoints to the members that answer, until ctx
// ends. etcd's client sends calls to its endpoints in turn, including one
// whose member has stopped answering with its connections open (a frozen
// machine, a partition), until its keepalive gives that member up; it
// also sends them to a member that has just come back and must catch up
// before it answers. Each round asks every member, on a client of its own,
// for a linearizable read, which a member answers only with a leader and
// once it has applied what the leader had committed; the members that do
// not answer within memberProbeTimeout get no calls until they do. If none
// answers, all of them get calls, since there is nothing better, and
// unanswered holds when the first round found none answering, in Unix
// nanoseconds, until one answers again (0 meanwhile). A server cannot tell
// that from its watches: a member frozen with its connections open holds
// them without an error, and nothing written comes back to show that they
// are stuck, since nothing can be written.
func followAnswering(ctx context.Context, c *clientv3.Client, cfg clientv3.Config, clk clock.WithTicker, log *slog.Logger, unanswered *atomic.Int64) {
	all := slices.Clone(cfg.Endpoints)
	probes := make([]*clientv3.Client, len(all))
	for i, ep := range all {
		pc := cfg
		pc.Endpoints, pc.DialTimeout, pc.Logger = []string{ep}, 0, zap.NewNop()
		p, err := clientv3.New(pc)
		if err != nil {
			log.Warn("cannot probe etcd member; it keeps getting calls", "endpoint", ep, "err", err)
			continue
		}
		defer p.Close()
		probes[i] = p
	}
	current := all
	tick.Every(ctx, clk, memberProbeInterval, func() {
		answers := make([]bool, len(all))
		var wg sync.WaitGroup
		for i, p := range probes {
			if p == nil {
				answers[i] = true
				continue
			}
			wg.Go(func() {
				pctx, cancel := context.WithTimeout(ctx, memberProbeTimeout)
				defer cancel()
				_, err := p.Get(pctx, "health")
				answers[i] = err == nil || errors.Is(err, rpctypes.ErrPermissionDenied)
			})
		}
		wg.Wait()
		none := !slices.Contains(answers, true)
		switch {
		case none && unanswered.Load() == 0 && ctx.Err() == nil:
			unanswered.Store(clk.Now().UnixNano())
			log.Warn("no etcd member answers", "endpoints", all)
		case !none && unanswered.Swap(0) != 0:
			log.Info("an etcd member answers again")
		}
		answering := callable(all, answers)
		if slices.Equal(answering, current) || ctx.Err() != nil {
			return
		}
		for _, ep := range all {
			was, is := slices.Contains(current, ep), slices.Contains(answering, ep)
			switch {
			case was && !is:
				log.Warn("etcd member does not answer; sending it no calls until it does", "endpoint", ep)
			case !was && is && !none:
				// With none answering, every member is called again, and
				// "no etcd member answers" said so.
				log.Info("etcd member answers again", "endpoint", ep)
			}
		}
		c.SetEndpoints(answering...)
		current = answering
	})
}

// callable is the endpoints of all that answered, or all of them if none
// did.
func callable(all []string, answered []bool) []string {
	var out []string
	for i, ep := range all {
		if answered[i] {
			out = append(out, ep)
		}
	}
	if len(out) == 0 {
		return all
	}
	return out
}

// etcdHealthTimeout bounds each request of whyEtcdUnreachable.
const etcdHealthTimeout = 2 * time.Second

// whyEtcdUnreachable asks each endpoint's /health over HTTP, with the
// client's TLS configuration, for what its gRPC calls report only as a
// deadline exceeded: a refused connection, an unknown name, a certificate
// the CA did not sign, a member asking for a client certificate, plain
// HTTP sent to a TLS port, a member without a leader. Nil when an
// endpoint answers healthy (or none can be asked so, such as a unix
// socket), the reason then being elsewhere.
func whyEtcdUnreachable(ctx context.Context, endpoints []string, tlsCfg *tls.Config) error {
	client := &http.Client{Timeout: etcdHealthTimeout, Transport: &http.Transport{TLSClientConfig: tlsCfg.Clone(), DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	var errs []error
	for _, ep := range endpoints {
		u := ep
		if !strings.Contains(u, "://") {
			u = "http://" + u
		}
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return nil
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(u, "/")+"/health", nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ep, err))
			continue
		}
		resp, err := client.Do(req)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			errs = append(errs, fmt.Errorf("%s: %s %s", ep, resp.Status, bytes.TrimSpace(body)))
			continue
		}
		return nil
	}
	return errors.Join(errs...)
}
