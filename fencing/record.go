package fencing

// Record is what a guarded resource holds, as the backends' FencedGet read
// it back: the value and the fence record of the last write the fencing
// rule accepted.
type Record struct {
	Value  string // the stored value, if Found
	Found  bool   // whether the resource has a value
	Fence  Token  // the highest token accepted so far (0 if none yet)
	Holder string // the holder id that presented Fence ("" if none yet)
}
