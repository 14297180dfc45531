package clitest

import (
	"os"
	"os/exec"
	"syscall"
)

// StartSelf runs the test binary again, with no test selected and
// envName=value added to its environment, as the child named what (its
// TestMain sees envName and serves instead of running tests), and starts
// it with StartReady. The child has a process group of its own and is
// killed if the test process dies.
func StartSelf(what, envName, value string) (arg string, stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), envName+"="+value)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	return StartReady(what, cmd)
}
