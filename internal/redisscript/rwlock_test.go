package redisscript

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock/driver"
)

// val is a Value of a test reply: nil for a nil (Lua false) value.
type val struct{ s *string }

func (v val) Text() (string, bool, error) {
	if v.s == nil {
		return "", false, nil
	}
	return *v.s, true, nil
}

func (v val) Int() (int64, error) {
	if v.s == nil {
		return 0, errors.New("nil")
	}
	return strconv.ParseInt(*v.s, 10, 64)
}

func vals(s ...string) []Value {
	out := make([]Value, len(s))
	for i := range s {
		if s[i] != "<nil>" {
			out[i] = val{&s[i]}
		} else {
			out[i] = val{}
		}
	}
	return out
}

// ReadRWInspect turns owners into holder ids, sorts readers by fence, and
// refuses a reply it cannot read with an error wrapping ErrCorrupt.
func TestReadRWInspect(t *testing.T) {
	info, err := ReadRWInspect("n", vals("<nil>", "-2", "9", "1", "secret-b", "5000", "9", "secret-a", "4000", "7"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Writer != nil || info.Fence != 9 || info.Intents != 1 || len(info.Readers) != 2 ||
		info.Readers[0].Holder != driver.HolderID("secret-a") || info.Readers[0].Fence != 7 || info.Readers[1].Fence != 9 {
		t.Fatalf("two readers: %+v", info)
	}
	info, err = ReadRWInspect("n", vals("secret-w", "3000", "12", "0"))
	if err != nil || info.Writer == nil || info.Writer.Holder != driver.HolderID("secret-w") || info.Writer.Fence != 12 || !info.Held() {
		t.Fatalf("a writer: %+v, %v", info, err)
	}
	for _, bad := range [][]Value{
		vals("<nil>", "-2", "9"),
		vals("<nil>", "-2", "x", "0"),
		vals("<nil>", "-2", "9", "0", "secret", "100", "<nil>"),
		vals("<nil>", "-2", "9", "0", "secret", "100"),
	} {
		_, err := ReadRWInspect("n", bad)
		if !errors.Is(err, ErrCorrupt) || strings.Contains(err.Error(), "secret") {
			t.Errorf("reply of %d values: %v, want ErrCorrupt without an owner token", len(bad), err)
		}
	}
}
