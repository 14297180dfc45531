package driver

import "context"

// QueueObserver is told when a [WaitAcquirer] finds a request queued
// behind another holder. A Locker with a trace (fencedlock's
// Options.Trace) puts one in the context it passes to AcquireWait;
// backends do not implement it, they call [NoteQueued].
type QueueObserver interface {
	Queued(ctx context.Context)
}

type queueObserverKey struct{}

// WithQueueObserver returns a copy of ctx that carries o for [NoteQueued].
// The Locker calls it; a backend has no use for it.
func WithQueueObserver(ctx context.Context, o QueueObserver) context.Context {
	return context.WithValue(ctx, queueObserverKey{}, o)
}

// NoteQueued is called by a [WaitAcquirer]'s AcquireWait, with the context
// it was given, when it finds the request queued behind another holder:
// the Locker's observer then counts the wait (and the grant that follows
// as a hand-off). Without an observer in ctx it does nothing.
func NoteQueued(ctx context.Context) {
	if o, _ := ctx.Value(queueObserverKey{}).(QueueObserver); o != nil {
		o.Queued(ctx)
	}
}
