package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"
)

// TestFailoverConfig: requests go to one server until one gets no answer
// from it (refused, or past its deadline) or a 5xx or 429, and then to the
// next; a request its caller cancelled moves nothing.
func TestFailoverConfig(t *testing.T) {
	answer := func(code int) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			io.WriteString(w, r.Host)
		}))
		t.Cleanup(s.Close)
		return s
	}
	down := answer(200)
	down.Close()
	arrived := make(chan struct{}, 2)
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(hung.Close)
	busy, ok := answer(http.StatusServiceUnavailable), answer(200)

	var configs []*rest.Config
	for _, s := range []*httptest.Server{down, hung, busy, ok} {
		configs = append(configs, &rest.Config{Host: s.URL, BearerToken: "t"})
	}
	rc, err := failoverConfig(configs)
	if err != nil {
		t.Fatal(err)
	}
	client, err := rest.HTTPClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	get := func(ctx context.Context) (string, int, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rc.Host+"/version", nil)
		resp, err := client.Do(req)
		if err != nil {
			return "", 0, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), resp.StatusCode, nil
	}
	host := func(s *httptest.Server) string { return s.Listener.Addr().String() }

	// Refused: the next request goes to the hung server.
	if _, _, err := get(context.Background()); err == nil {
		t.Fatal("a request to a server that is down succeeded")
	}
	// Its caller gives up: no move.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	if _, _, err := get(ctx); err == nil {
		t.Fatal("a cancelled request to the hung server succeeded")
	}
	// Past its deadline: move on, to the busy one, whose 503 moves on again.
	// The deadline is the election's kind: a cancel whose cause says so.
	dctx, expire := context.WithCancelCause(context.Background())
	go func() { <-arrived; expire(context.DeadlineExceeded) }()
	if _, _, err := get(dctx); err == nil {
		t.Fatal("a request to the hung server met its deadline")
	}
	if got, code, err := get(context.Background()); err != nil || code != http.StatusServiceUnavailable || got != host(busy) {
		t.Fatalf("the request after a timeout: %q %d %v; want the busy server's 503", got, code, err)
	}
	for range 3 {
		if got, code, err := get(context.Background()); err != nil || code != 200 || got != host(ok) {
			t.Fatalf("after a 503: %q %d %v; want the last server, and to stay there", got, code, err)
		}
	}
}
