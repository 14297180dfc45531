package goredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

// conn is the go-redis side of [rediscore.Conn]: the core's commands as
// go-redis sends them (see process), each script sent at most once.
type conn struct{ b *Backend }

// Eval implements [rediscore.Conn]: EVALSHA, then EVAL after NOSCRIPT,
// each sent at most once (see runAs).
func (c conn) Eval(ctx context.Context, s *rediscore.Script, keys, args []string) ([]redisscript.Value, error) {
	cmd := make([]any, 0, 3+len(keys)+len(args))
	cmd = append(cmd, nil, nil, len(keys))
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	for _, a := range args {
		cmd = append(cmd, a)
	}
	vals, err := runAs(ctx, c.b, scriptOf(s), cmd, redis.NewCmd, onceOf).Slice()
	if err != nil {
		return nil, err
	}
	return values(vals), nil
}

// EvalInt implements [rediscore.Conn]: Eval of an integer reply, read as
// an int64 (a *redis.Cmd boxes it into an any, which allocates from 256
// up: fences, for a start), the command in call.Argv.
func (c conn) EvalInt(ctx context.Context, s *rediscore.Script, call *rediscore.Call) (int64, error) {
	return runAs(ctx, c.b, scriptOf(s), argvOf(call), redis.NewIntCmd, onceIntOf).Result()
}

// EvalInts implements [rediscore.Conn].
func (c conn) EvalInts(ctx context.Context, s *rediscore.Script, call *rediscore.Call) (int64, []int64, error) {
	v, err := runAs(ctx, c.b, scriptOf(s), argvOf(call), redis.NewCmd, onceOf).Result()
	if err != nil {
		return 0, nil, err
	}
	return ints(v)
}

// ints reads a script's reply v: an integer (n, vals nil) or an array of
// integers (vals, not nil).
func ints(v any) (int64, []int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil, nil
	case []any:
		vals := make([]int64, len(x))
		for i, e := range x {
			n, err := value{e}.Int()
			if err != nil {
				return 0, nil, err
			}
			vals[i] = n
		}
		return 0, vals, nil
	}
	return 0, nil, fmt.Errorf("unexpected reply of type %T, want an integer or an array", v)
}

// HMGet implements [rediscore.Conn].
func (c conn) HMGet(ctx context.Context, key string, fields []string) ([]redisscript.Value, error) {
	vals, err := c.b.c.HMGet(ctx, key, fields...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	return values(vals), nil
}

// Wrap implements [rediscore.Conn].
func (c conn) Wrap(op, key string, err error) error { return wrap(op, key, err) }

// Closed implements [rediscore.Conn].
func (c conn) Closed() bool { return c.b.closed.Load() }

// scriptOf returns s's SHA-1 and text as go-redis arguments, boxed once.
func scriptOf(s *rediscore.Script) script { return script{s.Boxed[0], s.Boxed[1]} }

// argvOf writes the command of call into call.Argv: two slots for the
// command name and the script, numkeys, then pointers to the keys and
// arguments (no allocation: see rediscore.Call).
func argvOf(call *rediscore.Call) []any {
	a := append(call.Argv[:0], nil, nil, len(call.Keys))
	for i := range call.Keys {
		a = append(a, &call.Keys[i])
	}
	for i := range call.Args {
		a = append(a, &call.Args[i])
	}
	return a
}

// script is a script's SHA-1 and text as go-redis arguments (see
// scriptOf).
type script struct{ sha, lua any }

// runAs sends s as EVALSHA and, on NOSCRIPT, as EVAL, each command as
// once(command): go-redis does not send it again after a failure. cmd is
// the whole command with two slots first for the command name and the
// script: nil, nil, numkeys, keys..., args... (one slice, so that a call
// allocates it once).
func runAs[C redis.Cmder](ctx context.Context, b *Backend, s script, cmd []any, newCmd func(context.Context, ...any) C, once func(C) redis.Cmder) C {
	cmd[0], cmd[1] = "evalsha", s.sha
	r := newCmd(ctx, cmd...)
	if err := b.process(ctx, once(r)); err != nil {
		return abandoned(ctx, err, newCmd)
	}
	if isNoScript(r.Err()) {
		cmd[0], cmd[1] = "eval", s.lua
		r = newCmd(ctx, cmd...)
		if err := b.process(ctx, once(r)); err != nil {
			return abandoned(ctx, err, newCmd)
		}
	}
	return r
}

// onceCmd and onceIntCmd are script commands that go-redis must send at most
// once (their NoRetry is true). go-redis sends a command again after a
// network error (up to the client's MaxRetries), also when the command was
// written and only its reply was lost: the server may then have run the
// script already. A release sent again finds the lock it deleted gone and
// replies "not held", which would tell the caller that it lost the lease it
// released. So the first attempt's error is returned instead, an unknown
// outcome (the Locker cleans up after an acquire whose outcome it cannot
// know). go-redis still replays a command that never reached the wire, and
// follows MOVED and ASK (the server did not run it).
type (
	onceCmd    struct{ *redis.Cmd }
	onceIntCmd struct{ *redis.IntCmd }
)

// NoRetry implements redis.Cmder: the command is not sent again.
func (onceCmd) NoRetry() bool { return true }

// NoRetry implements redis.Cmder: the command is not sent again.
func (onceIntCmd) NoRetry() bool { return true }

func onceOf(c *redis.Cmd) redis.Cmder       { return onceCmd{c} }
func onceIntOf(c *redis.IntCmd) redis.Cmder { return onceIntCmd{c} }

// abandoned returns a command failed with err, the error of ctx, in place
// of the one process gave up on, which the autopipeliner may still write
// and fill in (it must not be read nor its arguments changed). That
// command's outcome is unknown: the Locker's clean-up (a release with the
// abandon mark) makes it take nothing if it arrives later.
func abandoned[C redis.Cmder](ctx context.Context, err error, newCmd func(context.Context, ...any) C) C {
	c := newCmd(ctx)
	c.SetErr(err)
	return c
}

// process sends one command; its outcome is c's. While at most as many
// commands of this backend are in flight as the client has pooled
// connections, it goes out on its own pooled connection as go-redis's Do
// sends it: one round trip, on the caller's goroutine. Beyond that (it
// would wait for a connection) it goes through the client's autopipeliner
// (go-redis's AutoPipeline), which writes the commands waiting at that
// moment as one pipeline on one connection: one write and one read instead
// of one per command, on the client and on the server. (Below the pool size
// the autopipeliner is slower: it sends one batch at a time, and hands each
// command to its own goroutine and back.)
//
// The blocking autopipeliner ignores the context of a queued command, so a
// client with ContextTimeoutEnabled (which asks for contexts to bound
// commands) gets the deferred one (AsyncAutoPipeline) instead, whose wait
// ends with ctx. process then returns ctx's error, and c, still queued or
// in flight, must be left alone: it may still be written and run.
//
// A client without ContextTimeoutEnabled (go-redis's default) bounds a
// command by its own timeouts only (ReadTimeout, WriteTimeout, retries),
// not by ctx: a Release to a stopped server took 5 s whatever the Locker's
// ReleaseTimeout. With a ctx that can end, process then sends c on a
// goroutine of its own and returns ctx's error when ctx ends first (see
// untilDone), c left alone as above.
func (b *Backend) process(ctx context.Context, c redis.Cmder) error {
	if b.ctxTimeouts || ctx.Done() == nil {
		return b.send(ctx, c)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.send(ctx, c)
	}()
	return untilDone(ctx, done)
}

// untilDone waits until done is closed (nil) or ctx ends first (ctx's
// error): the goroutine that closes done, sending a command on a client
// whose commands do not end with ctx, then goes on alone, and what it
// writes must not be read.
func untilDone(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		select {
		case <-done: // both: the reply is there
			return nil
		default:
			return ctx.Err()
		}
	}
}

// send sends c as process describes, on the caller's goroutine when the
// client's commands end with their ctx (or ctx cannot end), else on the
// goroutine process starts for it.
func (b *Backend) send(ctx context.Context, c redis.Cmder) error {
	defer b.inflight.Add(-1)
	if b.inflight.Add(1) > b.direct {
		if ap := b.pipeliner(); ap != nil {
			if !b.ctxTimeouts {
				_ = ap.Process(ctx, c)
				return nil
			}
			err := ap.Submit(ctx, c).WaitContext(ctx)
			if err != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
				return err
			}
			return nil
		}
	}
	_ = b.c.Process(ctx, c)
	return nil
}

// pipeliner returns the client's autopipeliner (see process), asked for
// once (at the first concurrent command); nil if the client has none to
// give (then every command goes out alone).
func (b *Backend) pipeliner() *redis.AutoPipeliner {
	b.apOnce.Do(func() {
		var (
			ap  *redis.AutoPipeliner
			err error
		)
		if b.ctxTimeouts {
			ap, err = b.c.AsyncAutoPipeline()
		} else {
			ap, err = b.c.AutoPipeline()
		}
		if err != nil || ap == nil || ap.IsBlocking() == b.ctxTimeouts {
			if b.opts.Logger != nil {
				b.opts.Logger.Debug("goredis: no autopipeliner; commands go out one per connection", "err", err)
			}
			return
		}
		b.ap = ap
	})
	return b.ap
}

// isNoScript reports whether err is the server's NOSCRIPT reply. It tests
// for nil first: redis.HasErrorPrefix allocates on every call, nil or not
// (one allocation per command on the hot path).
func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// nodeFor returns the client whose connection carries a pipeline for key:
// for a cluster, the client of the primary serving key's slot (WAIT
// counts the writes of its own connection, so it must go there too).
func (b *Backend) nodeFor(ctx context.Context, key string) (redis.Cmdable, error) {
	if cc, ok := b.c.(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, key)
	}
	return b.c, nil
}

// EvalWait implements [rediscore.Conn]: the script (sent at most once, as
// runAs does) and WAIT in one pipeline on one connection, with EVAL on
// NOSCRIPT.
func (c conn) EvalWait(ctx context.Context, rs *rediscore.Script, call *rediscore.Call, replicas int, timeout time.Duration) (n, acked int64, err error) {
	sc, wc, err := c.evalWait(ctx, rs, call, replicas, timeout)
	if err != nil {
		return 0, 0, err
	}
	if n, err = sc.Int64(); err != nil {
		return 0, 0, err
	}
	if n <= 0 {
		return n, 0, nil // nothing written: WAIT's answer does not matter
	}
	if acked, err = wc.Int64(); err != nil {
		return 0, 0, err
	}
	return n, acked, nil
}

// EvalIntsWait implements [rediscore.Conn]: the pipeline of EvalWait,
// with the script's reply read as EvalInts reads it.
func (c conn) EvalIntsWait(ctx context.Context, rs *rediscore.Script, call *rediscore.Call, replicas int, timeout time.Duration) (rediscore.Waited, error) {
	var w rediscore.Waited
	sc, wc, err := c.evalWait(ctx, rs, call, replicas, timeout)
	if err != nil {
		return w, err
	}
	v, err := sc.Result()
	if err != nil {
		return w, err
	}
	if w.N, w.Vals, err = ints(v); err != nil {
		return w, err
	}
	w.Acked, w.WaitErr = wc.Int64()
	return w, nil
}

// evalWait sends the script rs with call and WAIT replicas timeout as one
// pipeline to the node of call's first key, EVAL again with WAIT after
// NOSCRIPT, and returns both commands; err is ctx's if it ended first.
func (c conn) evalWait(ctx context.Context, rs *rediscore.Script, call *rediscore.Call, replicas int, timeout time.Duration) (sc, wc *redis.Cmd, err error) {
	b, s, cmd := c.b, scriptOf(rs), argvOf(call)
	waitMs := timeout.Milliseconds()
	node, err := b.nodeFor(ctx, call.Keys[0])
	if err != nil {
		return nil, nil, err
	}
	run := func(eval bool) (*redis.Cmd, *redis.Cmd) {
		p := node.Pipeline()
		if eval {
			cmd[0], cmd[1] = "eval", s.lua
		} else {
			cmd[0], cmd[1] = "evalsha", s.sha
		}
		sc := redis.NewCmd(ctx, cmd...)
		_ = p.Process(ctx, onceCmd{sc}) // go-redis sends no pipeline with it again (see onceCmd)
		wc := p.Do(ctx, "wait", replicas, waitMs)
		_, _ = p.Exec(ctx) // the errors are read from each command
		return sc, wc
	}
	// Exec does not end with ctx on a client without ContextTimeoutEnabled
	// (see process).
	var s1, w1 *redis.Cmd // send's: not touched after ctx ended
	send := func() {
		s1, w1 = run(false)
		if isNoScript(s1.Err()) {
			s1, w1 = run(true)
		}
	}
	if b.ctxTimeouts || ctx.Done() == nil {
		send()
		return s1, w1, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		send()
	}()
	if err := untilDone(ctx, done); err != nil {
		return nil, nil, err // s1 and w1 are send's: left alone
	}
	return s1, w1, nil
}

// value is a value of a go-redis reply, read by internal/redisscript.
type value struct{ v any }

func (v value) Text() (string, bool, error) {
	switch x := v.v.(type) {
	case string:
		return x, true, nil
	case []byte:
		return string(x), true, nil
	case int64:
		return strconv.FormatInt(x, 10), true, nil
	case nil:
		return "", false, nil
	case error:
		return "", false, x
	}
	return "", false, fmt.Errorf("unexpected reply value of type %T", v.v)
}

func (v value) Int() (int64, error) {
	if n, ok := v.v.(int64); ok {
		return n, nil
	}
	return 0, fmt.Errorf("unexpected reply value of type %T, want an integer", v.v)
}

// values wraps a go-redis reply for internal/redisscript.
func values(vals []any) []redisscript.Value {
	out := make([]redisscript.Value, len(vals))
	for i, v := range vals {
		out[i] = value{v}
	}
	return out
}
