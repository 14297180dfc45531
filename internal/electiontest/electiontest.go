// Package electiontest holds the election scenarios every backend that
// implements driver.Elector runs (backend/memory through package
// election's tests, backend/etcd in its clustertest), with only the
// constructors changed: a resigned or paused leader's write refused by the
// backend's fencing.Store, a Resign racing its term's expiry, a cancelled
// Campaign leaving nothing, Observe in order under churn.
package electiontest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/fencing"
)

// Setup is what the scenarios need from a backend's test.
type Setup struct {
	// New returns an Election on a backend of its own, as another process
	// would have, closed when t ends. opts.TTL is zero or TTL.
	New func(t *testing.T, opts fencedlock.Options) *election.Election
	// Store is the backend's fenced store, shared by all its Elections.
	Store fencing.Store
	// TTL is the short lease of the scenarios with a leader paused past it.
	TTL time.Duration
	// Queued, if set, counts the entries the store holds for an election
	// name (held and waiting), to show a cancelled Campaign left none.
	Queued func(t *testing.T, name string) int
}

func name(prefix string) string { return prefix + "-" + rand.Text()[:8] }

func campaign(t *testing.T, ctx context.Context, e *election.Election, name, value string) *election.Term {
	t.Helper()
	term, err := e.Campaign(ctx, name, []byte(value))
	if err != nil {
		t.Fatalf("Campaign(%q, %q): %v", name, value, err)
	}
	return term
}

// wantStale fails t unless err is a *fencing.StaleError that saw accepted.
func wantStale(t *testing.T, err error, accepted fencing.Token, why string) {
	t.Helper()
	var se *fencing.StaleError
	if !errors.As(err, &se) || !errors.Is(err, fencing.ErrStale) || se.Accepted != accepted {
		t.Fatalf("%s: %v, want a *fencing.StaleError having accepted %v", why, err, accepted)
	}
}

// retrying are the options of a campaigner that must lead soon after the
// key is free (short retry delays where the backend polls).
var retrying = fencedlock.Options{MinRetryDelay: time.Millisecond, MaxRetryDelay: 10 * time.Millisecond}

// ResignedLeaderWriteRefused: a leader writes, resigns; the next leader's
// fence is greater, it writes; the first leader's late write is refused
// and Leader reports the second term.
func ResignedLeaderWriteRefused(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ea, eb := s.New(t, fencedlock.Options{}), s.New(t, fencedlock.Options{})
	n, key := name("resigned"), name("resigned/data")
	a := campaign(t, ctx, ea, n, "a")
	if err := s.Store.Set(ctx, key, "by a", a.Fence(), a.Holder()); err != nil {
		t.Fatalf("leader a's write: %v", err)
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	b := campaign(t, ctx, eb, n, "b")
	defer b.Resign(ctx)
	if b.Fence() <= a.Fence() {
		t.Fatalf("term b's fence %v is not above term a's %v", b.Fence(), a.Fence())
	}
	if err := s.Store.Set(ctx, key, "by b", b.Fence(), b.Holder()); err != nil {
		t.Fatalf("leader b's write: %v", err)
	}
	wantStale(t, s.Store.Set(ctx, key, "late a", a.Fence(), a.Holder()), b.Fence(), "resigned leader a's late write")
	if rec, err := s.Store.Get(ctx, key); err != nil || rec.Value != "by b" {
		t.Fatalf("stored %+v, %v after the refused write, want %q", rec, err, "by b")
	}
	l, err := ea.Leader(ctx, n)
	if err != nil || l.Fence != b.Fence() || string(l.Value) != "b" || l.Holder != b.Holder() || l.TTL <= 0 {
		t.Fatalf("Leader = %+v, %v; want term b (fence %v)", l, err, b.Fence())
	}
}

// PausedLeaderWriteRefused: a leader paused past its TTL (no renewals)
// loses its term; the next campaigner leads no earlier than the TTL after
// the paused one's Campaign began, and writes; the paused leader's write
// on resuming is refused, its Resign deletes nothing, and an observer saw
// the two terms in order.
func PausedLeaderWriteRefused(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	paused := s.New(t, fencedlock.Options{TTL: s.TTL, ManualRenew: true})
	next, obs := s.New(t, retrying), s.New(t, fencedlock.Options{})
	n, key := name("paused"), name("paused/data")
	events, err := obs.Observe(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now() // before a's term began: b cannot lead before start+TTL
	a := campaign(t, ctx, paused, n, "a")
	b := campaign(t, ctx, next, n, "b") // blocks until a's term expired on the store
	defer b.Resign(ctx)
	if waited := time.Since(start); waited < s.TTL {
		t.Fatalf("b led %v after a's Campaign began, within a's TTL of %v: two leaders", waited, s.TTL)
	}
	if err := a.Err(); !errors.Is(err, fencedlock.ErrLeaseLost) {
		t.Fatalf("paused leader's Err = %v, want ErrLeaseLost", err)
	}
	if err := s.Store.Set(ctx, key, "by b", b.Fence(), b.Holder()); err != nil {
		t.Fatalf("leader b's write: %v", err)
	}
	wantStale(t, s.Store.Set(ctx, key, "late a", a.Fence(), a.Holder()), b.Fence(), "paused leader a's write after resuming")
	if err := a.Resign(ctx); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("paused leader's Resign = %v, want ErrNotHeld", err)
	}
	if l, err := obs.Leader(ctx, n); err != nil || l.Fence != b.Fence() {
		t.Fatalf("Leader after the paused leader's Resign = %+v, %v; want term b", l, err)
	}
	var got []election.Event
	for ev := range events {
		got = append(got, ev)
		if ev.Held && ev.Fence == b.Fence() {
			break
		}
	}
	want := []string{"none", fmt.Sprint(a.Fence(), " a"), "none", fmt.Sprint(b.Fence(), " b")}
	if d := Describe(got); fmt.Sprint(d) != fmt.Sprint(want) {
		t.Fatalf("observed %v, want %v", d, want)
	}
}

// Describe renders events for messages: "none", or "<fence> <value>",
// with " (missed)" when Missed is set.
func Describe(evs []election.Event) []string {
	var s []string
	for _, ev := range evs {
		d := "none"
		if ev.Held {
			d = fmt.Sprint(ev.Fence, " ", string(ev.Value))
		}
		if ev.Missed {
			d += " (missed)"
		}
		s = append(s, d)
	}
	return s
}

// ResignRacesExpiry: for rounds rounds, a leader that is never renewed
// resigns around its term's expiry while another campaigner waits: the
// Resign, whichever comes first, never ends the next leader's term.
func ResignRacesExpiry(t *testing.T, s Setup, rounds int) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Duration(rounds)*(2*s.TTL+10*time.Second))
	defer cancel()
	ea, eb := s.New(t, fencedlock.Options{TTL: s.TTL, ManualRenew: true}), s.New(t, retrying)
	step := s.TTL / 10 / time.Duration(max(rounds, 1))
	for i := range rounds {
		n := name("race")
		a := campaign(t, ctx, ea, n, "a")
		bc := make(chan *election.Term, 1)
		go func() {
			b, err := eb.Campaign(ctx, n, []byte("b"))
			if err != nil {
				t.Errorf("Campaign b: %v", err)
			}
			bc <- b
		}()
		time.Sleep(s.TTL - time.Duration(i)*step) // around the expiry, a little earlier each round
		rerr := a.Resign(ctx)                     // nil, or ErrNotHeld once expired
		b := <-bc
		if b == nil {
			return
		}
		if rerr != nil && !errors.Is(rerr, fencedlock.ErrNotHeld) {
			t.Fatalf("round %d: Resign = %v, want nil or ErrNotHeld", i, rerr)
		}
		if err := b.Err(); err != nil {
			t.Fatalf("round %d: b's term ended by a's Resign racing its expiry: %v", i, err)
		}
		if l, err := ea.Leader(ctx, n); err != nil || l.Fence != b.Fence() {
			t.Fatalf("round %d: Leader = %+v, %v; want b's term (fence %v)", i, l, err, b.Fence())
		}
		_ = b.Resign(ctx)
	}
}

// CancelledCampaignLeavesNothing: a Campaign whose context ends while
// another leads returns the context's error and ErrNotAcquired and leaves
// no term and no waiter (s.Queued): once the leader resigns there is no
// leader, and the next campaigner's fence is above the first term's.
func CancelledCampaignLeavesNothing(t *testing.T, s Setup) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ea, eb, ec := s.New(t, fencedlock.Options{}), s.New(t, fencedlock.Options{}), s.New(t, fencedlock.Options{})
	n := name("cancelled")
	a := campaign(t, ctx, ea, n, "a")
	cctx, ccancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer ccancel()
	if _, err := eb.Campaign(cctx, n, []byte("b")); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencedlock.ErrNotAcquired) {
		t.Fatalf("cancelled Campaign = %v, want DeadlineExceeded and ErrNotAcquired", err)
	}
	if s.Queued != nil {
		if q := s.Queued(t, n); q != 1 {
			t.Fatalf("%d entries after the cancelled Campaign, want 1 (the leader's)", q)
		}
	}
	if l, err := ec.Leader(ctx, n); err != nil || l.Fence != a.Fence() {
		t.Fatalf("Leader after a cancelled Campaign = %+v, %v; want a's term", l, err)
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Queued != nil {
		if q := s.Queued(t, n); q != 0 {
			t.Fatalf("%d entries after the only leader resigned, want 0", q)
		}
	}
	if _, err := ec.Leader(ctx, n); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader after the only leader resigned = %v, want ErrNoLeader (the cancelled Campaign left a term)", err)
	}
	c := campaign(t, ctx, ec, n, "c")
	defer c.Resign(ctx)
	if c.Fence() <= a.Fence() {
		t.Fatalf("c's fence %v not above a's %v", c.Fence(), a.Fence())
	}
}

// ObserveUnderChurn: campaigners Elections take rounds terms each, in
// turn, while an observer receives concurrently: the terms it delivers are
// in increasing fence order with their leaders' values, it ends with no
// leader, and every term is delivered unless an event says Missed.
func ObserveUnderChurn(t *testing.T, s Setup, campaigners, rounds int) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	n := name("churn")
	events, err := s.New(t, fencedlock.Options{}).Observe(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	ledCh := make(chan map[fencing.Token]string, 1)
	es := make([]*election.Election, campaigners)
	for i := range es {
		es[i] = s.New(t, retrying)
	}
	go churn(t, ctx, es, n, rounds, ledCh)
	var (
		led  map[fencing.Token]string // set when every campaigner is done
		last fencing.Token            // the greatest fence led
		got  []election.Event
		cur  election.Event
	)
	for led == nil || cur.Held || (newest(got) < last && !cur.Missed) {
		select {
		case led = <-ledCh:
			for f := range led {
				last = max(last, f)
			}
			continue
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("Observe's channel closed before the last term ended: %v", Describe(got))
			}
			if ev.Held && ev.Fence <= newest(got) {
				t.Fatalf("Observe delivered the term of fence %v after the term of fence %v: %v", ev.Fence, newest(got), Describe(append(got, ev)))
			}
			cur, got = ev, append(got, ev)
		}
	}
	seen, missed := 0, false
	for _, ev := range got {
		missed = missed || ev.Missed
		if !ev.Held {
			continue
		}
		seen++
		if want, ok := led[ev.Fence]; !ok || string(ev.Value) != want {
			t.Fatalf("Observe delivered the term of fence %v with value %q, want %q: %v", ev.Fence, ev.Value, want, Describe(got))
		}
	}
	if seen != len(led) && !missed {
		t.Fatalf("Observe delivered %d of %d terms and never said Missed: %v", seen, len(led), Describe(got))
	}
	t.Logf("%d terms led, %d delivered, missed %v", len(led), seen, missed)
}

// newest is the greatest fence of the terms in evs (0 if none).
func newest(evs []election.Event) fencing.Token {
	var f fencing.Token
	for _, ev := range evs {
		if ev.Held {
			f = max(f, ev.Fence)
		}
	}
	return f
}

// churn runs the campaigners of ObserveUnderChurn and sends the terms they
// led, by fence, when all are done.
func churn(t *testing.T, ctx context.Context, es []*election.Election, n string, rounds int, out chan<- map[fencing.Token]string) {
	done := make(chan map[fencing.Token]string, len(es))
	for c, e := range es {
		go func() {
			led := make(map[fencing.Token]string)
			defer func() { done <- led }()
			for i := range rounds {
				v := fmt.Sprintf("c%d-%d", c, i)
				term, err := e.Campaign(ctx, n, []byte(v))
				if err != nil {
					t.Errorf("Campaign: %v", err)
					return
				}
				led[term.Fence()] = v
				if err := term.Resign(ctx); err != nil {
					t.Errorf("Resign: %v", err)
				}
			}
		}()
	}
	all := make(map[fencing.Token]string)
	for range es {
		for f, v := range <-done {
			all[f] = v
		}
	}
	out <- all
}
