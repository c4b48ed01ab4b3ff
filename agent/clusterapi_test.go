package agent

import (
	"strings"
	"testing"

	"rackd/agent/api"
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
