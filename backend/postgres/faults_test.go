package postgres_test

import (
	"context"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencedlock/fencedlock/conformance"
	"github.com/fencedlock/fencedlock/driver"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
)

// NewFaultyBackend makes every PostgreSQL harness a
// conformance.FaultInjector (issue 35 item 4): the backend's pool connects
// through a TCP proxy of its own to where the harness's backends connect
// (the server, or PgBouncer), so StoreFaults refuses its connections,
// delays the server's replies, and drops a reply after the server applied
// (committed) the statement.
func (h *harness) NewFaultyBackend(ctx context.Context) (driver.Backend, conformance.Faults, error) {
	cfg, err := pgxpool.ParseConfig(h.url)
	if err != nil {
		return nil, nil, err
	}
	target := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	px, err := faultproxy.New(target)
	if err != nil {
		return nil, nil, err
	}
	h.t.Cleanup(func() { px.Close() })
	host, port, err := net.SplitHostPort(px.Addr())
	if err != nil {
		return nil, nil, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, nil, err
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	cfg.ConnConfig.Fallbacks = nil
	b, err := h.newBackend(ctx, cfg)
	return b, faultproxy.Faults{P: px}, err
}
