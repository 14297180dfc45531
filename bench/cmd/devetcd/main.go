// Command devetcd runs a single-member etcd on loopback for trying
// fencedlock on etcd, on a machine with Go and nothing else:
//
//	cd bench && go run ./cmd/devetcd            # etcd on http://127.0.0.1:2379 until Ctrl-C
//
// It is for development only: one member, no fsync, its data in a
// temporary directory removed on exit (-data-dir keeps it). (`go install
// go.etcd.io/etcd/server/v3@...` fails on etcd's replace directives; this
// embeds the server the bench module already builds.)
package main

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() { os.Exit(run()) }

func run() int {
	listen := flag.String("listen", "127.0.0.1:2379", "client `host:port` (loopback); port 0 picks a free one")
	dataDir := flag.String("data-dir", "", "data `directory` to keep (default: a temporary one, removed on exit)")
	flag.Parse()
	dir := *dataDir
	if dir == "" {
		d, err := os.MkdirTemp("", "devetcd-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "devetcd:", err)
			return 1
		}
		defer os.RemoveAll(d)
		dir = d
	}
	client, err := freeURL(*listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "devetcd: -listen:", err)
		return 2
	}
	peer, err := freeURL("127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "devetcd:", err)
		return 1
	}
	cfg := embed.NewConfig()
	cfg.Name = "devetcd"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = true // development only
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "devetcd:", err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "devetcd: not ready after 30s")
		return 1
	}
	fmt.Printf("devetcd: etcd for development on %s (data in %s); Ctrl-C stops it\n", client.String(), dir)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sigs:
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "devetcd:", err)
		return 1
	}
	return 0
}

// freeURL returns http://hostport, with a free port in place of port 0.
func freeURL(hostport string) (*url.URL, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, err
	}
	if port == "0" {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, err
		}
		hostport = l.Addr().String()
		l.Close()
	}
	return url.Parse("http://" + hostport)
}
