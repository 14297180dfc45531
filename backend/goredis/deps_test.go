package goredis

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDepsNoRueidisNoEtcd: a program importing only the root package and
// backend/goredis compiles neither rueidis nor etcd (nor their gRPC).
// testdata is ignored by ./..., but go list builds it when named.
func TestDepsNoRueidisNoEtcd(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./testdata/onlygoredis").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	var sawGoRedis, sawRoot bool
	for _, d := range deps {
		switch {
		case strings.HasPrefix(d, "github.com/redis/rueidis"),
			strings.HasPrefix(d, "go.etcd.io/"),
			strings.HasPrefix(d, "google.golang.org/grpc"):
			t.Errorf("a go-redis program compiles %s", d)
		case d == "github.com/redis/go-redis/v9":
			sawGoRedis = true
		case d == "github.com/fencedlock/fencedlock":
			sawRoot = true
		}
	}
	if !sawGoRedis || !sawRoot {
		t.Fatalf("go list -deps lists neither go-redis nor the root package: %d packages", len(deps))
	}
	t.Logf("%d packages, none of rueidis, etcd or gRPC", len(deps))
}
