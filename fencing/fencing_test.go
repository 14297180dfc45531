package fencing_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/fencedlock/fencedlock/fencing"
)

func TestCheck(t *testing.T) {
	cases := []struct {
		why              string
		accepted         fencing.Token
		acceptedFrom     string
		token            fencing.Token
		holder           string
		wantStale, wantI bool
	}{
		{"first write on a fresh resource", 0, "", 1, "a", false, false},
		{"newer token", 41, "a", 42, "b", false, false},
		{"same holder writes again with its token", 42, "b", 42, "b", false, false},
		{"equal token from another holder (failover duplicate)", 42, "b", 42, "c", true, false},
		{"older token (paused holder resumes)", 42, "b", 41, "a", true, false},
		{"zero token is never granted", 0, "", 0, "a", false, true},
		{"equal token without a holder id never matches", 42, "", 42, "", true, false},
	}
	for _, c := range cases {
		err := fencing.Check(c.accepted, c.acceptedFrom, c.token, c.holder)
		if got := errors.Is(err, fencing.ErrStale); got != c.wantStale {
			t.Errorf("%s: err %v, stale=%v want %v", c.why, err, got, c.wantStale)
		}
		if got := errors.Is(err, fencing.ErrInvalidToken); got != c.wantI {
			t.Errorf("%s: err %v, invalid=%v want %v", c.why, err, got, c.wantI)
		}
		var se *fencing.StaleError
		if c.wantStale && (!errors.As(err, &se) || se.Accepted != c.accepted) {
			t.Errorf("%s: %v is not a StaleError naming %d", c.why, err, c.accepted)
		}
	}
}

func TestGuardWritesNothingOnRejection(t *testing.T) {
	var g fencing.Guard
	state := 0
	write := func(v int) func() error { return func() error { state = v; return nil } }
	if err := g.Do(42, "b", write(1)); err != nil {
		t.Fatal(err)
	}
	if err := g.Do(41, "a", write(2)); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("older token: %v", err)
	}
	if err := g.Do(42, "c", write(3)); !errors.Is(err, fencing.ErrStale) {
		t.Fatalf("equal token, other holder: %v", err)
	}
	if state != 1 {
		t.Fatalf("rejected write ran: state %d", state)
	}
	// A failing write records nothing.
	if err := g.Do(50, "d", func() error { return errors.New("disk full") }); err == nil {
		t.Fatal("write error lost")
	}
	if tok, h := g.Accepted(); tok != 42 || h != "b" {
		t.Fatalf("accepted %d/%s after failed write, want 42/b", tok, h)
	}
}

func TestGuardAtomicUnderRace(t *testing.T) {
	var g fencing.Guard
	var wg sync.WaitGroup
	var mu sync.Mutex
	var order []fencing.Token
	for i := 1; i <= 200; i++ {
		wg.Add(1)
		go func(tok fencing.Token) {
			defer wg.Done()
			_ = g.Do(tok, fmt.Sprint(tok), func() error {
				mu.Lock()
				order = append(order, tok)
				mu.Unlock()
				return nil
			})
		}(fencing.Token(i))
	}
	wg.Wait()
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Fatalf("accepted writes went back: %v after %v", order[i], order[i-1])
		}
	}
	if tok, _ := g.Accepted(); tok != order[len(order)-1] {
		t.Fatalf("accepted %d, last write %d", tok, order[len(order)-1])
	}
}

func TestTokenText(t *testing.T) {
	b, err := json.Marshal(map[string]fencing.Token{"fence": 18446744073709551615})
	if err != nil || string(b) != `{"fence":"18446744073709551615"}` {
		t.Fatalf("%s %v", b, err)
	}
	var m map[string]fencing.Token
	if err := json.Unmarshal(b, &m); err != nil || m["fence"] != 18446744073709551615 {
		t.Fatalf("%v %v", m, err)
	}
	for _, bad := range []string{"", "-1", "x", "18446744073709551616"} {
		if _, err := fencing.ParseToken(bad); !errors.Is(err, fencing.ErrInvalidToken) {
			t.Errorf("ParseToken(%q): %v", bad, err)
		}
	}
}

func FuzzParseToken(f *testing.F) {
	f.Add("42")
	f.Add("0")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := fencing.ParseToken(s)
		if err != nil {
			return
		}
		if back, err := fencing.ParseToken(tok.String()); err != nil || back != tok {
			t.Fatalf("round trip %q -> %v -> %v %v", s, tok, back, err)
		}
	})
}

func ExampleGuard() {
	var g fencing.Guard
	balance := 100
	// B holds fence 42 and writes.
	_ = g.Do(42, "holder-b", func() error { balance = 70; return nil })
	// A, paused while holding fence 41, resumes and tries to write.
	err := g.Do(41, "holder-a", func() error { balance = 0; return nil })
	fmt.Println(errors.Is(err, fencing.ErrStale), balance)
	// Output: true 70
}
