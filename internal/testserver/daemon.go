package testserver

import (
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// daemon is a server process started by startDaemon (postgres,
// pgbouncer): its command and the channel that receives its exit status
// once.
type daemon struct {
	cmd    *exec.Cmd
	exited chan error
}

// startDaemon starts cmd as the user cred (nil: this process's user),
// dying with the test binary (Pdeathsig) even if no cleanup runs (a
// panic, a killed test), and polls ready every 50 ms for up to wait. It
// fails if the process exits first or is not ready in time (it is killed
// then); the errors name the server what and carry its log.
func startDaemon(cmd *exec.Cmd, cred *syscall.Credential, what string, wait time.Duration, ready func() bool, log func() string) (*daemon, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", what, err)
	}
	d := &daemon{cmd: cmd, exited: make(chan error, 1)}
	go func() { d.exited <- cmd.Wait() }()
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-d.exited:
			return nil, fmt.Errorf("%s exited during startup: %v\n%s", what, err, log())
		default:
		}
		if ready() {
			return d, nil
		}
	}
	d.kill()
	return nil, fmt.Errorf("%s not ready after %v\n%s", what, wait, log())
}

// stop shuts the server down with SIGINT (a fast shutdown for both),
// killing it if it has not exited after 10 seconds.
func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		d.kill()
	}
}

// kill sends SIGKILL and waits for the process to exit.
func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	<-d.exited
}
