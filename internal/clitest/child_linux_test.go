package clitest

import (
	"fmt"
	"io"
	"os"
	"testing"
)

// selfChildEnv turns this test binary into the child of TestStartSelf.
const selfChildEnv = "CLITEST_SELF_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(selfChildEnv); v != "" {
		fmt.Println("READY " + v)
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestStartSelf: the test binary run again with the variable set is the
// child that TestMain serves; its READY argument comes back.
func TestStartSelf(t *testing.T) {
	arg, stop, err := StartSelf("self child", selfChildEnv, "value")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if arg != "value" {
		t.Errorf("arg %q, want %q", arg, "value")
	}
}
