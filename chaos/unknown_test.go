package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/fencedlock/fencedlock/fencing"
	"github.com/fencedlock/fencedlock/internal/faultproxy"
)

// TestUnknownOutcomeIsInfo: a claim or write that timed out or lost its
// connection may have been applied: the worker must record it as info
// (unknown), never fail (which the checker drops: the model would then
// assume it never happened). Each register is driven through a fault
// proxy: a blackhole until the operation's context ends (timeout), and a
// reset of the connection while the request is held (reset).
func TestUnknownOutcomeIsInfo(t *testing.T) {
	const ttl = 300 * time.Millisecond
	rs := newRedisSetup(t, "unknown", false)
	pg, db := startSQLRegister(t)
	regKey := "chaos:register:unknown"
	if _, err := db.Exec("INSERT INTO chaos_register (key) VALUES ($1) ON CONFLICT (key) DO NOTHING", regKey); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{RegisterRedis, RegisterSQL} {
		target := rs.srv.Addr
		if kind == RegisterSQL {
			target = fmt.Sprintf("127.0.0.1:%d", pg.Port)
		}
		px, err := faultproxy.New(target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		cfg := WorkerConfig{Lock: LockRedis, RedisAddr: rs.srv.Addr, Register: kind, TTL: ttl, RegKey: regKey, MaxTime: time.Minute}
		if kind == RegisterRedis {
			cfg.RedisAddr = px.Addr()
		} else {
			_, port, _ := net.SplitHostPort(px.Addr())
			cfg.SQLDSN = fmt.Sprintf("host=127.0.0.1 port=%s user=%s dbname=postgres sslmode=disable connect_timeout=2", port, pg.User)
		}
		_, reg, closeAll, err := open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeAll)
		ops := map[Op]func(ctx context.Context) error{
			OpClaim: func(ctx context.Context) error { return reg.Claim(ctx, 1, "h") },
			OpWrite: func(ctx context.Context) error { return reg.Write(ctx, 1, 1, "h") },
		}
		for _, op := range []Op{OpClaim, OpWrite} {
			// A working link first: the connection exists and the
			// operation succeeds (ok), so the faults below hit an
			// established connection. The first attempts after a
			// reset may still meet the dead connection.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(ttl / 10) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := ops[op](ctx)
				cancel()
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s %s on a healthy link for 10s: %v", kind, op, err)
				}
			}
			for _, fault := range []string{"timeout", "reset"} {
				px.Blackhole(true)
				ctx, cancel := context.WithTimeout(context.Background(), ttl)
				done := make(chan error, 1)
				go func() { done <- ops[op](ctx) }()
				if fault == "reset" {
					time.Sleep(ttl / 3) // the request is held in the proxy
					px.ResetAll()
				} else {
					// Past the operation's deadline, then heal, as
					// the nemesis does: a driver may cancel a query
					// through a new connection, itself held until then.
					time.Sleep(ttl + ttl/2)
				}
				px.Heal()
				var err error
				select {
				case err = <-done:
				case <-time.After(10 * time.Second):
					t.Fatalf("%s %s under a %s: no return within 10s of the heal", kind, op, fault)
				}
				cancel()
				if err == nil {
					t.Fatalf("%s %s: no error under a %s", kind, op, fault)
				}
				if ph := phaseOf(err); ph != Info {
					t.Errorf("%s %s under a %s: phase %s, want info (unknown): %v", kind, op, fault, ph, err)
				}
				t.Logf("%s %s under a %s: %s: %v", kind, op, fault, phaseOf(err), err)
			}
		}
	}
	// What the classification must keep: a guard's rejection is stale,
	// a marked no-effect error fail, success ok.
	for _, c := range []struct {
		err  error
		want Phase
	}{
		{nil, OK},
		{fmt.Errorf("x: %w", &fencing.StaleError{Token: 1, Holder: "h"}), Stale},
		{errors.Join(errFail, context.DeadlineExceeded), Fail},
		{context.DeadlineExceeded, Info},
		{context.Canceled, Info},
	} {
		if got := phaseOf(c.err); got != c.want {
			t.Errorf("phaseOf(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

// TestCheckerUnknownTakesEffectLate: an operation of unknown outcome goes
// to porcupine as one that may take effect at any time after its
// invocation, even after its worker's later operations, or never. Here an
// unknown claim with fence 3 is the only explanation of a later rejection
// of fence 2 (legal only if the claim happened), and an unknown write is
// seen by the final read long after its worker moved on. Dropped or
// counted as failed, either would make the history illegal.
func TestCheckerUnknownTakesEffectLate(t *testing.T) {
	var b hb
	b.round(0, 1, 0, OK)              // register 1, fence record 1
	b.op(0, OpClaim, Info, 3, "a", 0) // unknown: timed out
	b.op(1, OpAcquire, OK, 2, "b", 0)
	b.op(1, OpClaim, Stale, 2, "b", 0) // only the unknown claim explains it
	b.op(1, OpRelease, OK, 2, "b", 0)
	b.op(2, OpAcquire, OK, 4, "c", 0)
	b.op(2, OpClaim, OK, 4, "c", 0)
	b.op(2, OpRead, OK, 0, "", 1)
	b.op(2, OpWrite, Info, 4, "c", 2) // unknown: the final read sees it
	b.op(2, OpRelease, OK, 4, "c", 0)
	r := b.check(t, 2)
	if a, bb, c, d, e := r.Violations(); a+bb+c+d+e != 0 {
		t.Fatalf("unknown operations that took effect reported:\n%s", r.Summary())
	}
	if r.Ops != 9 || r.Unknown != 1 {
		t.Fatalf("%d ops given to porcupine (want 9: 4 claims, 2 reads, 2 writes, the final read), %d unknown writes (want 1)", r.Ops, r.Unknown)
	}
	// The same history with the unknown claim recorded as failed (what a
	// misclassified timeout would give) is illegal: the checker would
	// have reported a violation the system did not commit.
	for i := range b.events {
		if b.events[i].Op == OpClaim && b.events[i].Phase == Info {
			b.events[i].Phase = Fail
		}
	}
	if r := b.check(t, 2); r.Linearizable != porcupine.Illegal {
		t.Fatalf("with the unknown claim counted as failed the history was %s, want Illegal", r.Linearizable)
	}
}
