package api

import "time"

// CodeNotClustered answers a cluster call on an agent that is no member
// of a cluster (a database file, or etcd without rackd's member set-up).
const CodeNotClustered = "not_clustered"

// ClusterJoin is the body of POST /api/v1/cluster/members: a new appliance
// asking to join, sent over the cluster's TLS listener.
type ClusterJoin struct {
	// Name is its etcd member's (and agent's) name, unique in the cluster.
	Name string `json:"name"`
	// PeerURL and ClientURL are https://HOST:PORT of its etcd member.
	PeerURL   string `json:"peer_url"`
	ClientURL string `json:"client_url"`
	// Hosts are further names or addresses its server certificate needs
	// (its cluster TLS listener's, when not the member's host).
	Hosts []string `json:"hosts,omitempty"`
	// Keys are its public keys, PEM (PKIX), by kind: server, peer, client.
	// The private halves never leave it.
	Keys map[string]string `json:"keys"`
}

// ClusterJoined is the answer to a join: everything the new appliance
// needs to run its member and serve on the shared store.
type ClusterJoined struct {
	// CACert and CAKey are the cluster CA (PEM): every member holds it,
	// so that any of them can add the next one.
	CACert string `json:"ca_cert"`
	CAKey  string `json:"ca_key"`
	// Certs are its certificates (PEM) by kind, on the keys it sent.
	Certs map[string]string `json:"certs"`
	// InitialCluster is every member's name and peer URL, its own too.
	InitialCluster map[string]string `json:"initial_cluster"`
	// StoreURL is etcds:// with every member's client URL, its own first.
	StoreURL   string `json:"store_url"`
	EtcdPrefix string `json:"etcd_prefix"`
	// CredentialKey and SecretsKey are the contents of credential.key and
	// secrets.key, the same on every agent.
	CredentialKey []byte `json:"credential_key"`
	SecretsKey    []byte `json:"secrets_key"`
}

// ClusterMember is one etcd member, as DELETE /api/v1/cluster/members/{name}
// answers it.
type ClusterMember struct {
	Name string `json:"name"`
}

// ClusterStatus is GET /api/v1/cluster: the agents sharing the store,
// what each leads, and the etcd cluster.
type ClusterStatus struct {
	// Clustered is false for an agent on its own database file: a single
	// appliance, no cluster (Message says so; the lists are empty).
	Clustered bool   `json:"clustered"`
	Message   string `json:"message,omitempty"`
	// Store is the store's URL (or the database file).
	Store string `json:"store"`
	// Agent is the name of the agent that answered.
	Agent     string            `json:"agent,omitempty"`
	Agents    []ClusterAgent    `json:"agents"`
	Members   []EtcdMember      `json:"members"`
	Endpoints []ClusterEndpoint `json:"endpoints"`
}

// ClusterAgent is one live agent: its registration and its leaderships.
type ClusterAgent struct {
	Name         string    `json:"name"`
	AdvertiseURL string    `json:"advertise_url,omitempty"`
	Version      string    `json:"version,omitempty"`
	Started      time.Time `json:"started"`
	// Subnets are the subnets whose DHCP it answers; PowerShards the
	// shards of BMCs it drives.
	Subnets     []string `json:"subnets"`
	PowerShards []int    `json:"power_shards"`
}

// EtcdMember is one member of the etcd cluster.
type EtcdMember struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peer_urls"`
	ClientURLs []string `json:"client_urls"`
	// Learner: added, not voting yet (it is catching up, or its
	// appliance has not started it).
	Learner bool `json:"learner"`
}

// ClusterEndpoint is one etcd endpoint's health as this agent sees it.
type ClusterEndpoint struct {
	URL      string `json:"url"`
	Healthy  bool   `json:"healthy"`
	MemberID string `json:"member_id,omitempty"`
	Version  string `json:"version,omitempty"`
	Leader   bool   `json:"leader"`
	DBSize   int64  `json:"db_size,omitempty"`
	// Error is why it did not answer, or the alarms it raised.
	Error string `json:"error,omitempty"`
}
