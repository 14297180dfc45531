package chaos

import (
	"slices"
	"sort"
	"testing"
)

// semaHistory is three permits of slots 0, 1, 2: 0 valid 10-500 ms, 1
// valid 100-300 ms, 2 valid from 300 ms (when 1's release began) to 400
// ms, and slot 1 again (fence 2) from 350 to 450 ms.
func semaHistory(t *testing.T) History {
	t.Helper()
	var b timed
	permit := func(w, slot int, fence uint64, h string, ret, rel int64) {
		b.grant(w, fence, h, ret-5, ret, rel+1000)
		b.events[len(b.events)-1].Slot = slot
		b.release(w, fence, h, rel, 0)
		b.events[len(b.events)-2].Slot, b.events[len(b.events)-1].Slot = slot, slot
	}
	permit(0, 0, 1, "a", 10, 500)
	permit(1, 1, 1, "b", 100, 300)
	permit(2, 2, 1, "c", 300, 400)
	permit(3, 1, 2, "d", 350, 450)
	sort.SliceStable(b.events, func(i, j int) bool { return b.events[i].T < b.events[j].T })
	h, err := BuildHistory(b.events)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestCheckLimit: the history holds at most 3 valid permits (350-400 ms);
// a limit of 2 is broken there only (a release at the instant of a grant
// is no overlap), a limit of 3 never.
func TestCheckLimit(t *testing.T) {
	h := semaHistory(t)
	if o := CheckLimit(h, 3, 0); len(o) != 0 {
		t.Fatalf("limit 3 broken: %+v", o)
	}
	o := CheckLimit(h, 2, 0)
	if len(o) != 1 || o[0].N != 3 || o[0].From != ms(350) || o[0].To != ms(400) {
		t.Fatalf("limit 2: got %+v, want 3 permits from 350 to 400 ms", o)
	}
	if want := []int{0, 1, 2}; !slices.Equal(o[0].Slots, want) {
		t.Fatalf("slots %v, want %v", o[0].Slots, want)
	}
}

// TestSplitSlots: each slot's part holds its own grants only, and checks
// clean as a lock's history (slot 1's two permits do not overlap), while
// slot fences repeat across slots without a (c) violation.
func TestSplitSlots(t *testing.T) {
	parts := SplitSlots(semaHistory(t))
	if len(parts) != 3 {
		t.Fatalf("%d parts, want 3", len(parts))
	}
	var reports []Report
	for slot, p := range parts {
		for _, o := range p.Ops {
			if o.Slot != slot {
				t.Fatalf("slot %d's part holds an op of slot %d", slot, o.Slot)
			}
		}
		p.Final = &Operation{Worker: 9, Op: OpFinal, Call: p.End, Return: p.End + 1, Phase: OK}
		reports = append(reports, Check(p, CheckOptions{}))
	}
	m := MergeReports(reports...)
	if a, b, c, d, e := m.Violations(); a+b+c+d+e != 0 {
		t.Fatalf("violations (a) %d (b) %d (c) %d (d) %d (e) %d:\n%s", a, b, c, d, e, m.Summary())
	}
	// The whole history, checked as one lock, has the overlaps the slots
	// make legal and the repeated fence 1.
	if whole := Check(semaHistory(t), CheckOptions{}); len(whole.Overlaps) == 0 || len(whole.FenceErrs) == 0 {
		t.Fatalf("the unsplit history passed (b) or (c): %s", whole.Summary())
	}
}
