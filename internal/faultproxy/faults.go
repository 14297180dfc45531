package faultproxy

import "time"

// Faults drives a Proxy through the methods of conformance.Faults, so that
// every harness with a TCP proxy in front of its server shares one
// implementation of the conformance suite's fault hook.
type Faults struct{ P *Proxy }

// Refuse resets the open connections and refuses new ones while on.
func (f Faults) Refuse(on bool) {
	f.P.RefuseNew(on)
	if on {
		f.P.ResetAll()
	}
}

// DelayReplies delays every reply by d (SetReplyLatency).
func (f Faults) DelayReplies(d time.Duration) { f.P.SetReplyLatency(d) }

// DropReplies cuts the next n replies (CutReplies).
func (f Faults) DropReplies(n int) { f.P.CutReplies(n) }
