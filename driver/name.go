package driver

import (
	"path"
	"reflect"
)

// Namer is implemented by a backend whose name in trace events is not its
// package's: a view that runs on another backend (the backends packages
// rwlock, semaphore and multilock give their Lockers) returns the name of
// that backend, Name(it), so that a read lease, a permit or a set is
// traced as the store it lives in ("redis", "goredis", "etcd", "memory").
type Namer interface {
	BackendName() string
}

// Name returns the name trace events carry for backend b: b.BackendName()
// if b is a [Namer], otherwise the last element of the package path of b's
// type ("redis" for a *redis.Backend), or the type's name if it has none.
func Name(b any) string {
	if n, ok := b.(Namer); ok {
		return n.BackendName()
	}
	t := reflect.TypeOf(b)
	if t == nil {
		return "<nil>"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if p := t.PkgPath(); p != "" {
		return path.Base(p)
	}
	return t.String()
}
