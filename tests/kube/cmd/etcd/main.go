// Command etcd runs a single-member etcd in-process (go.etcd.io/etcd/server/v3/embed)
// for the test API server. Loopback only, no TLS, no fsync: test data is thrown away.
// It stops cleanly on SIGTERM/SIGINT.
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		log.Fatalf("etcd: bad url %q: %v", s, err)
	}
	return *u
}

func main() {
	dir := flag.String("data-dir", "", "data directory (required)")
	client := flag.String("listen-client-url", "http://127.0.0.1:2379", "client URL")
	peer := flag.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL")
	logLevel := flag.String("log-level", "warn", "zap log level")
	version := flag.Bool("version", false, "print the etcd server version and exit")
	flag.Parse()
	if *version {
		println(embedVersion())
		return
	}
	if *dir == "" {
		log.Fatal("etcd: --data-dir is required")
	}

	cfg := embed.NewConfig()
	cfg.Name = "fleetmedic-test"
	cfg.Dir = *dir
	cu, pu := mustURL(*client), mustURL(*peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.LogLevel = *logLevel
	cfg.UnsafeNoFsync = true // throwaway test data; fsync only slows tests down

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd: start: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		log.Printf("etcd: ready on %s", cu.String())
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		log.Fatal("etcd: not ready after 60s")
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		log.Printf("etcd: %v, stopping", s)
	case err := <-e.Err():
		log.Printf("etcd: %v", err)
	}
	e.Close()
}
