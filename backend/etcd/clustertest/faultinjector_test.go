package clustertest

import (
	"context"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
)

// NewFaultyBackend makes the harness a conformance.FaultInjector. The
// backend's client reaches a real member through internal/faultproxy, so
// every fault is one of the connection: a refused or reset connection, late
// replies, and a reply cut after the member applied its request (the
// member's gRPC server has served it, the Raft entry is committed; only the
// bytes of the reply are lost).
//
// The members listen on unix sockets behind the framework's bridges, and
// the proxy forwards TCP, so the member's own gRPC server is also served on
// a TCP listener of 127.0.0.1 for this backend alone (the server closes it
// when the cluster stops). The client dials the proxy whatever address its
// resolver picked: it has one endpoint, that member.
func (h *conformanceHarness) NewFaultyBackend(ctx context.Context) (driver.Backend, conformance.Faults, error) {
	n := h.n % len(h.e.clus.Members)
	h.n++
	m := h.e.clus.Members[n]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	go m.GRPCServer.Serve(ln) //nolint:errcheck // returns when the listener or the server closes
	h.e.t.Cleanup(func() { ln.Close() })
	px, err := faultproxy.New(ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	h.e.t.Cleanup(func() { px.Close() })
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", px.Addr())
	}
	f := &cutFaults{Faults: faultproxy.Faults{P: px}}
	h.e.t.Cleanup(func() {
		if f.asked > 0 && px.RepliesCut() == 0 {
			h.e.t.Errorf("DropReplies asked for %d lost replies and the proxy cut none: the lost-reply cases tested nothing", f.asked)
		}
	})
	return h.e.countedBackend(n, grpc.WithContextDialer(dial)), f, nil
}

// cutFaults is faultproxy.Faults counting the replies DropReplies asked to
// lose, so that the harness can check the proxy really cut some.
type cutFaults struct {
	faultproxy.Faults
	asked int
}

// DropReplies counts n and arms the proxy.
func (f *cutFaults) DropReplies(n int) {
	f.asked += n
	f.Faults.DropReplies(n)
}

// NewDelayedBackend makes the harness a conformance.Delayer: the faulty
// backend's proxy delays every reply by delay, so that SentIsSendTime can
// tell a Sent taken at the request from one taken at the reply.
func (h *conformanceHarness) NewDelayedBackend(ctx context.Context, delay time.Duration) (driver.Backend, error) {
	b, f, err := h.NewFaultyBackend(ctx)
	if err != nil {
		return nil, err
	}
	f.DelayReplies(delay)
	return b, nil
}
