package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rackd/api"
	"rackd/images"
)

// TestClusterAPIOnFile: an agent on its database file says plainly that it
// is a single appliance, refuses to add or remove members, and serves no
// peer blobs.
func TestClusterAPIOnFile(t *testing.T) {
	ta := startAgent(t)
	var st api.ClusterStatus
	if code, raw := ta.call(t, ta.admin, "GET", "/api/v1/cluster", nil, &st); code != 200 {
		t.Fatalf("status: %d %s", code, raw)
	}
	if st.Clustered || !strings.Contains(st.Message, "single appliance, no cluster") || len(st.Agents) != 0 {
		t.Fatalf("status on a file: %+v", st)
	}
	user := ta.addUser(t, "someone", false)
	if code, _ := ta.call(t, user, "GET", "/api/v1/cluster", nil, nil); code != 403 {
		t.Fatalf("status as a non-admin: %d, want 403", code)
	}
	if code, raw := ta.call(t, ta.admin, "POST", "/api/v1/cluster/members", api.ClusterJoin{Name: "b"}, nil); code != 403 || !strings.Contains(string(raw), "TLS") {
		t.Fatalf("join over plain HTTP: %d %s", code, raw)
	}
	if code, raw := ta.call(t, ta.admin, "DELETE", "/api/v1/cluster/members/b", nil, nil); code != 409 || !strings.Contains(string(raw), api.CodeNotClustered) {
		t.Fatalf("remove on a file: %d %s", code, raw)
	}
	if code, _ := ta.call(t, "", "GET", images.PeerBlobPath+strings.Repeat("a", 64), nil, nil); code != 401 {
		t.Fatalf("a peer blob without the cluster's certificate: %d, want 401", code)
	}
}

// TestClusterOverlay: what cluster init/join writes is read back over the
// configuration, valid, and an unknown key in it is refused like in the
// configuration file.
func TestClusterOverlay(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StateDir = t.TempDir()
	if had, err := ApplyClusterOverlay(&cfg); had || err != nil {
		t.Fatalf("no overlay: %v %v", had, err)
	}
	if err := os.MkdirAll(ClusterDir(cfg.StateDir), 0o700); err != nil {
		t.Fatal(err)
	}
	o := NewClusterOverlay(cfg.StateDir, "etcds://127.0.0.1:2379", "/rackd/", "rack1", "127.0.0.1:5241")
	if err := WriteClusterOverlay(cfg.StateDir, o); err != nil {
		t.Fatal(err)
	}
	if had, err := ApplyClusterOverlay(&cfg); !had || err != nil {
		t.Fatalf("overlay: %v %v", had, err)
	}
	if cfg.Store.URL != "etcds://127.0.0.1:2379" || !cfg.Cluster.EtcdMember || cfg.Cluster.Name != "rack1" ||
		cfg.Cluster.AdvertiseURL != "https://127.0.0.1:5241" || cfg.Cluster.ListenTLS != "127.0.0.1:5241" ||
		cfg.Store.EtcdCert != filepath.Join(ClusterDir(cfg.StateDir), "client.crt") {
		t.Fatalf("config after the overlay: store %+v cluster %+v", cfg.Store, cfg.Cluster)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(ClusterDir(cfg.StateDir), ClusterOverlayFile)
	if err := os.WriteFile(path, []byte("[cluster]\netcd_membr = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ApplyClusterOverlay(&cfg); err == nil || !strings.Contains(err.Error(), "etcd_membr") {
		t.Fatalf("a typo in the overlay: %v", err)
	}
}
