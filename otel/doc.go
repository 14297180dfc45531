// Package otelfencedlock records the events of fencedlock Lockers as
// OpenTelemetry metrics and traces. It is a module of its own
// (github.com/fencedlock/fencedlock/otel), so the library itself has no
// OpenTelemetry dependency; the library's hooks (fencedlock.Options.Trace,
// package [locktrace]) cost nothing while unset.
//
//	obs, err := otelfencedlock.New() // the global providers; see the Options
//	locker, err := fencedlock.New(backend, fencedlock.Options{Trace: obs.Trace()})
//
// # Metrics
//
// Names, units and types follow OpenTelemetry's semantic-convention style:
// durations are float histograms in seconds, counts are counters with a
// {unit} annotation. Every metric carries fencedlock.backend (the backend's
// package name: redis, goredis, etcd, memory) and, only with
// [WithKeyAttribute], fencedlock.key.
//
//	| Name                                 | Type          | Unit      | Attributes (besides backend, key)                                  |
//	|--------------------------------------|---------------|-----------|--------------------------------------------------------------------|
//	| fencedlock.acquire.duration          | Histogram     | s         | fencedlock.acquire.blocking, fencedlock.acquire.outcome, error.type |
//	| fencedlock.acquire.wait.duration     | Histogram     | s         | fencedlock.acquire.outcome (blocking acquires only; 0 if no wait)  |
//	| fencedlock.acquire.handoffs          | Counter       | {handoff} |                                                                    |
//	| fencedlock.lease.active              | UpDownCounter | {lease}   |                                                                    |
//	| fencedlock.lease.held.duration       | Histogram     | s         | fencedlock.lease.end.cause                                         |
//	| fencedlock.lease.lost                | Counter       | {lease}   | fencedlock.lease.end.cause                                         |
//	| fencedlock.renew.duration            | Histogram     | s         | fencedlock.renew.keepalive, error.type (failures only)             |
//	| fencedlock.release.duration          | Histogram     | s         | fencedlock.release.outcome, error.type (errors only)               |
//	| fencedlock.critical_section.duration | Histogram     | s         | fencedlock.lease.lost                                              |
//
// Attribute values:
//
//   - fencedlock.acquire.outcome: acquired, not_acquired (held by another
//     owner, or a wait ended by its context), error.
//   - fencedlock.acquire.wait.duration measures from the first sign of
//     contention (the key found held, or queued behind a holder on etcd) to
//     the end of the Acquire.
//   - fencedlock.acquire.handoffs counts blocking Acquires satisfied by the
//     attempt right after a release notification (Redis), or granted after
//     the server queued them behind a holder (etcd).
//   - fencedlock.lease.end.cause: released, or the cause of a loss:
//     not_held (the server said the owner no longer holds the key: deleted
//     or taken over), deadline (no renewal succeeded before the local
//     deadline), invalidated (a permanent renewal failure, or the backend
//     stopped keeping the lease alive). fencedlock.lease.lost counts the
//     losses only.
//   - fencedlock.release.outcome: released, not_held (the lease had been
//     lost or released, or the server no longer held it), error.
//   - error.type: not_held, lease_lost, closed, invalid, permanent,
//     timeout, canceled, not_acquired, or _OTHER (see [ErrorType]).
//
// # Spans
//
// All spans are internal spans carrying fencedlock.backend (and
// fencedlock.key with [WithKeyAttribute]); fencedlock.fence and
// fencedlock.holder (the non-secret holder id) once the lease exists. The
// owner token is never recorded.
//
//	| Span                        | Covers                        | Attributes and events                                                     |
//	|-----------------------------|-------------------------------|---------------------------------------------------------------------------|
//	| fencedlock.acquire          | Acquire, TryAcquire, Do's     | fencedlock.acquire.blocking, .outcome, .handoff, .waited (s), fence,      |
//	|                             | acquire                       | holder; events fencedlock.wait (fencedlock.wait.kind: held, retry,        |
//	|                             |                               | notified, queued; fencedlock.wait.retry_after in s; error.type)           |
//	| fencedlock.critical_section | Do's function; the parent of  | fence, holder, fencedlock.lease.lost; status Error when the function      |
//	|                             | the spans the function starts | failed or the lease was lost                                              |
//	| fencedlock.release          | Lease.Release (also Do's and  | fence, holder, fencedlock.release.outcome                                 |
//	|                             | Locker.Close's)               |                                                                           |
//
// A span whose operation failed (outcome error) has status Error, the
// error recorded as an exception event and error.type set. The lock key is
// off by default because it may name a business object, and the errors
// name it (redis: acquire "payroll/employee-4711": dial tcp ...): without
// [WithKeyAttribute] the recorded exception.message has the key replaced
// by [RedactedKey] (redis: acquire "[key]": dial tcp ...), so that no span
// and no metric carries it.
package otelfencedlock
