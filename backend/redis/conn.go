package redis

import (
	"context"
	"time"

	"github.com/fencedlock/fencedlock/internal/rediscore"
	"github.com/fencedlock/fencedlock/internal/redisscript"
	"github.com/redis/rueidis"
)

// conn is the rueidis side of [rediscore.Conn]: the core's commands as
// rueidis sends them.
type conn struct{ b *Backend }

// eval runs s with keys and args: EVALSHA, then EVAL after NOSCRIPT (as
// rueidis.Lua.Exec does), again after another caller's context error if
// s.Again (see foreignCancel).
func (c conn) eval(ctx context.Context, s *rediscore.Script, keys, args []string) rueidis.RedisResult {
	cl := c.b.c
	nk := int64(len(keys))
	for i := 0; ; i++ {
		r := cl.Do(ctx, cl.B().Evalsha().Sha1(s.SHA).Numkeys(nk).Key(keys...).Arg(args...).Build())
		if re, ok := rueidis.IsRedisErr(r.Error()); ok && re.IsNoScript() {
			r = cl.Do(ctx, cl.B().Eval().Script(s.Lua).Numkeys(nk).Key(keys...).Arg(args...).Build())
		}
		if !s.Again || i == foreignRetries || !foreignCancel(ctx, r.Error()) {
			return r
		}
	}
}

// Eval implements [rediscore.Conn].
func (c conn) Eval(ctx context.Context, s *rediscore.Script, keys, args []string) ([]redisscript.Value, error) {
	vals, err := c.eval(ctx, s, keys, args).ToArray()
	if rueidis.IsRedisNil(err) || err == nil {
		return values(vals), nil
	}
	return nil, err
}

// EvalInt implements [rediscore.Conn].
func (c conn) EvalInt(ctx context.Context, s *rediscore.Script, call *rediscore.Call) (int64, error) {
	return c.eval(ctx, s, call.Keys, call.Args).AsInt64()
}

// EvalInts implements [rediscore.Conn].
func (c conn) EvalInts(ctx context.Context, s *rediscore.Script, call *rediscore.Call) (int64, []int64, error) {
	m, err := c.eval(ctx, s, call.Keys, call.Args).ToMessage()
	if err != nil {
		return 0, nil, err
	}
	if vals, err := m.AsIntSlice(); err == nil {
		return 0, append(make([]int64, 0, len(vals)), vals...), nil
	}
	n, err := m.AsInt64()
	return n, nil, err
}

// EvalWait implements [rediscore.Conn]: the script and WAIT in one
// DoMulti, which rueidis sends as one pipeline on one connection.
//
// It does not use rueidis.Lua (whose Exec does the same EVALSHA -> EVAL
// fallback): WAIT must follow the script on the same connection, and
// Lua.Exec and Lua.ExecMulti send scripts only, each on a connection
// rueidis chooses. Running Lua.Exec and then WAIT on a DedicatedClient
// would keep them on one connection but take two round trips to the
// primary instead of this pipeline's one, on every Acquire and Renew with
// WaitReplicas.
func (c conn) EvalWait(ctx context.Context, s *rediscore.Script, call *rediscore.Call, replicas int, timeout time.Duration) (n, acked int64, err error) {
	res := c.evalWait(ctx, s, call, replicas, timeout)
	if n, err = res[0].AsInt64(); err != nil {
		return 0, 0, err
	}
	if n <= 0 {
		return n, 0, nil // nothing written: WAIT's answer does not matter
	}
	if acked, err = res[1].AsInt64(); err != nil {
		// Written but unconfirmed: report the error. For an acquire the
		// Locker releases the lock (cleanupAfter) as for any failed
		// attempt; for a renew it keeps its old deadline and retries.
		return 0, 0, err
	}
	return n, acked, nil
}

// EvalIntsWait implements [rediscore.Conn]: the pipeline of EvalWait,
// with the script's reply read as EvalInts reads it.
func (c conn) EvalIntsWait(ctx context.Context, s *rediscore.Script, call *rediscore.Call, replicas int, timeout time.Duration) (rediscore.Waited, error) {
	res := c.evalWait(ctx, s, call, replicas, timeout)
	var w rediscore.Waited
	m, err := res[0].ToMessage()
	if err != nil {
		return w, err
	}
	if vals, err := m.AsIntSlice(); err == nil {
		w.Vals = append(make([]int64, 0, len(vals)), vals...)
	} else if w.N, err = m.AsInt64(); err != nil {
		return w, err
	}
	w.Acked, w.WaitErr = res[1].AsInt64()
	return w, nil
}

// evalWait sends s with call and WAIT replicas timeout in one DoMulti,
// EVAL again with WAIT after NOSCRIPT, and returns both replies.
func (c conn) evalWait(ctx context.Context, s *rediscore.Script, call *rediscore.Call, replicas int, timeout time.Duration) []rueidis.RedisResult {
	cl := c.b.c
	keys, args := call.Keys, call.Args
	waitCmd := func() rueidis.Completed {
		return cl.B().Wait().Numreplicas(int64(replicas)).Timeout(timeout.Milliseconds()).Build().SetSlot(keys[0])
	}
	nk := int64(len(keys))
	var res []rueidis.RedisResult
	for i := 0; ; i++ { // again after another caller's context error (see foreignCancel)
		res = cl.DoMulti(ctx, cl.B().Evalsha().Sha1(s.SHA).Numkeys(nk).Key(keys...).Arg(args...).Build(), waitCmd())
		if re, ok := rueidis.IsRedisErr(res[0].Error()); ok && re.IsNoScript() {
			res = cl.DoMulti(ctx, cl.B().Eval().Script(s.Lua).Numkeys(nk).Key(keys...).Arg(args...).Build(), waitCmd())
		}
		if !s.Again || i == foreignRetries || !foreignCancel(ctx, res[0].Error()) {
			return res
		}
	}
}

// HMGet implements [rediscore.Conn].
func (c conn) HMGet(ctx context.Context, key string, fields []string) ([]redisscript.Value, error) {
	cl := c.b.c
	vals, err := cl.Do(ctx, cl.B().Hmget().Key(key).Field(fields...).Build()).ToArray()
	if err != nil {
		return nil, err
	}
	return values(vals), nil
}

// Wrap implements [rediscore.Conn].
func (c conn) Wrap(op, key string, err error) error { return wrap(op, key, err) }

// Closed implements [rediscore.Conn].
func (c conn) Closed() bool { return c.b.closed.Load() }
