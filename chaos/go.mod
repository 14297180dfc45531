module github.com/fencedlock/fencedlock/chaos

go 1.26.0

replace github.com/fencedlock/fencedlock => ../

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/fencedlock/fencedlock v0.0.0-00010101000000-000000000000
	github.com/lib/pq v1.12.3
	github.com/redis/rueidis v1.0.79
	golang.org/x/sys v0.49.0
)
