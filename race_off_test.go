//go:build !race

package fencedlock_test

// raceEnabled: the race detector adds an allocation to some paths.
const raceEnabled = false
