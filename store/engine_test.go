package store

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"rackd/internal/etcdtest"
	"rackd/store/kv/etcdkv"
)

// testEngine, when set, gives each test's store (openTest) a fresh engine
// instead of a database file: RACKD_STORE_ENGINE=etcd runs the store's
// tests on a real etcd (one member, started here for the whole package),
// each test under a key prefix of its own. Tests of what only a file has
// (migrations, corruption, backups, reopening) open files themselves.
var testEngine func(t *testing.T) Engine

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if os.Getenv("RACKD_STORE_ENGINE") != "etcd" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "rackd-store-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	c, err := etcdtest.Launch(1, dir)
	if c != nil {
		defer c.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cli.Close()
	var n atomic.Int64
	testEngine = func(t *testing.T) Engine {
		return etcdkv.New(cli, etcdkv.Options{Prefix: fmt.Sprintf("/store-test-%d/", n.Add(1))})
	}
	return m.Run()
}
