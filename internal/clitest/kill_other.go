//go:build !unix

package clitest

// killGroup does nothing: process groups are a Unix notion.
func killGroup(pid int) {}
