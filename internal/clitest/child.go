package clitest

import (
	"bufio"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Bounds of StartReady: how long a child may take to print its READY line,
// and to exit once its standard input is closed before it is killed.
const (
	readyTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
)

// StartReady starts cmd, taking its standard input, output and error, and
// waits at most 30 s until the process prints a line "READY <arg>" on its
// standard output; it returns arg. stop closes the process's standard
// input, on which it must exit, and kills it if it has not 10 s later. If
// the process exits or is not ready in time, StartReady stops it and
// returns an error with what it wrote on its standard error.
func StartReady(what string, cmd *exec.Cmd) (arg string, stop func(), err error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	log := new(SyncBuffer)
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting %s: %w", what, err)
	}
	done := make(chan struct{})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				select {
				case ready <- a:
				default: // a second READY line: the first one counts
				}
			}
		}
		_ = cmd.Wait()
		close(done)
	}()
	stop = func() {
		_ = stdin.Close()
		select {
		case <-done:
		case <-time.After(stopTimeout):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	select {
	case a := <-ready:
		return a, stop, nil
	case <-done:
		stop()
		return "", nil, fmt.Errorf("%s exited during start; log:\n%s", what, log)
	case <-time.After(readyTimeout):
		stop()
		return "", nil, fmt.Errorf("%s not ready after %v; log:\n%s", what, readyTimeout, log)
	}
}
