package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"rackd/agent"
	"rackd/agent/client"
	"rackd/api"
	"rackd/internal/atomicfile"
	"rackd/internal/etcdmember"
	"rackd/store"
)

func clusterGroup() *group {
	g := &group{name: "cluster", summary: "Form a cluster of appliances, each running an etcd member beside rackd (docs/SCALE-OUT.md)."}
	g.verbs = []*verb{clusterStatusVerb(), clusterInitVerb(), clusterJoinVerb(), clusterRemoveVerb()}
	for _, v := range g.verbs {
		v.group = g.name
	}
	return g
}

// memberFlags are where this appliance's member and cluster listener go.
type memberFlags struct {
	config, stateDir, name, advertise string
	clientPort, peerPort, tlsPort     int
}

func (o *memberFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.config, "config", os.Getenv("RACKD_CONFIG"), "rackd's configuration `FILE` (env RACKD_CONFIG), for its state directory")
	fs.StringVar(&o.stateDir, "state-dir", "", "rackd's state `DIR` (default: the configuration's)")
	fs.StringVar(&o.name, "name", "", "this appliance's member `NAME`, unique in the cluster (default: the host name)")
	fs.StringVar(&o.advertise, "advertise", "", "this appliance's `ADDRESS` (IP or DNS name) that the other appliances reach")
	fs.IntVar(&o.clientPort, "client-port", 2379, "etcd's client `PORT`")
	fs.IntVar(&o.peerPort, "peer-port", 2380, "etcd's peer `PORT`")
	fs.IntVar(&o.tlsPort, "tls-port", 5241, "`PORT` of rackd's cluster TLS listener (joins, blob fetches)")
}

// setup loads rackd's configuration and checks that this appliance is in
// no cluster yet.
func (o *memberFlags) setup() (agent.Config, etcdmember.Member, error) {
	cfg, err := agent.LoadConfig(o.config, os.Getenv)
	if err != nil {
		return cfg, etcdmember.Member{}, err
	}
	if o.stateDir != "" {
		cfg.StateDir = o.stateDir
	}
	if o.advertise == "" {
		return cfg, etcdmember.Member{}, usagef("--advertise is required: the address the other appliances reach this one at")
	}
	if o.name == "" {
		if o.name, err = os.Hostname(); err != nil {
			return cfg, etcdmember.Member{}, fmt.Errorf("host name: %w (give --name)", err)
		}
	}
	if had, err := agent.ApplyClusterOverlay(&cfg); err != nil || had {
		return cfg, etcdmember.Member{}, errors.Join(err, fmt.Errorf("%s is in a cluster already (%s)", cfg.StateDir,
			filepath.Join(agent.ClusterDir(cfg.StateDir), agent.ClusterOverlayFile)))
	}
	if cfg.Store.URL != "" {
		return cfg, etcdmember.Member{}, fmt.Errorf("rackd is configured for the etcd store %s already: cluster init and join set up a member of rackd's own", cfg.Store.URL)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, etcdmember.DataDir)); err == nil {
		return cfg, etcdmember.Member{}, fmt.Errorf("%s exists: an etcd member's data from an earlier attempt? Remove it first", filepath.Join(cfg.StateDir, etcdmember.DataDir))
	}
	m := etcdmember.Member{Name: o.name, PeerURL: o.url(o.peerPort), ClientURL: o.url(o.clientPort)}
	if err := m.Validate(); err != nil {
		return cfg, m, usagef("%v", err)
	}
	return cfg, m, nil
}

func (o *memberFlags) url(port int) string {
	return "https://" + net.JoinHostPort(o.advertise, strconv.Itoa(port))
}

func (o *memberFlags) listenTLS() string {
	return net.JoinHostPort(o.advertise, strconv.Itoa(o.tlsPort))
}

func clusterInitVerb() *verb {
	return &verb{
		name:     "init",
		synopsis: "--advertise ADDRESS [--name NAME] [--client-port P] [--peer-port P] [--tls-port P] [--config FILE] [--state-dir DIR]",
		summary:  "make this appliance the first member of a new cluster, moving its database into it (local, rackd stopped)",
		help: `Run it with rackd stopped. It makes the cluster's CA and this appliance's
certificates in <state dir>/cluster, writes its etcd member's configuration
and starts the member, copies rackd.db into it (checked, as rackd store
migrate does; rackd.db stays as it was), stops the member and writes
<state dir>/cluster/rackd.toml, which points rackd at the cluster and makes
rackd serve run the member (cluster.etcd_member). Then start rackd; other
appliances join with the command printed at the end.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var o memberFlags
			o.register(fs)
			return func(e *env, _ []string) error { return clusterInit(e, &o) }
		},
	}
}

func clusterInit(e *env, o *memberFlags) (err error) {
	cfg, m, err := o.setup()
	if err != nil {
		return err
	}
	dir := agent.ClusterDir(cfg.StateDir)
	dataDir := filepath.Join(cfg.StateDir, etcdmember.DataDir)
	ca, err := etcdmember.CreateCA(dir, m.Name)
	if err != nil {
		return err
	}
	// A failed init leaves nothing: it can be run again.
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
			os.RemoveAll(dataDir)
		}
	}()
	if err := etcdmember.IssueLocal(dir, m.Name, append(m.Hosts(), o.advertise)); err != nil {
		return err
	}
	token := make([]byte, 8)
	rand.Read(token)
	conf, err := etcdmember.Settings{Member: m, Dir: dir, DataDir: dataDir, InitialCluster: map[string]string{m.Name: m.PeerURL},
		Token: "rackd-" + hex.EncodeToString(token)}.Write()
	if err != nil {
		return err
	}
	p, err := startMember(e, cfg, conf, m)
	if err != nil {
		return err
	}
	defer p.Stop()
	ov := agent.NewClusterOverlay(cfg.StateDir, "etcds://"+hostOf(m.ClientURL), cfg.Store.EtcdPrefix, m.Name, o.listenTLS())
	db := filepath.Join(cfg.StateDir, store.FileName)
	if _, err := os.Stat(db); err == nil {
		sc := cfg.Store
		sc.URL, sc.EtcdCA, sc.EtcdCert, sc.EtcdKey = ov.Store.URL, ov.Store.EtcdCA, ov.Store.EtcdCert, ov.Store.EtcdKey
		if err := migrateStore(e, db, sc); err != nil {
			return err
		}
	} else if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(e.stdout, "No database in %s: the cluster's store starts empty.\n", cfg.StateDir)
	} else {
		return err
	}
	if err := p.Stop(); err != nil {
		return err
	}
	if err := agent.WriteClusterOverlay(cfg.StateDir, ov); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "Cluster initialised: %s is its first member (%s).\n", m.Name, dir)
	fmt.Fprintf(e.stdout, "Start rackd now. Join another appliance, with rackd stopped there, by:\n")
	fmt.Fprintf(e.stdout, "  rackd cluster join https://%s --ca-sha256 %s --token ADMIN_TOKEN --advertise ITS_ADDRESS\n",
		o.listenTLS(), ca.Fingerprint())
	return nil
}

// startMember runs the member of conf until the caller stops it.
func startMember(e *env, cfg agent.Config, conf string, m etcdmember.Member) (*etcdmember.Process, error) {
	tc, err := etcdmember.ClientTLS(filepath.Dir(conf))
	if err != nil {
		return nil, err
	}
	p := &etcdmember.Process{Binary: cfg.Cluster.EtcdBinary, ConfigFile: conf, ClientURL: m.ClientURL, TLS: tc,
		StartTimeout: time.Duration(cfg.Cluster.StartTimeout),
		Log:          slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if err := p.Start(e.ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func hostOf(u string) string {
	if pu, err := url.Parse(u); err == nil {
		return pu.Host
	}
	return u
}

func clusterJoinVerb() *verb {
	return &verb{
		name:     "join",
		args:     []string{"URL"},
		synopsis: "--ca-sha256 HEX --token ADMIN_TOKEN --advertise ADDRESS [--name NAME] [--client-port P] [--peer-port P] [--tls-port P] [--config FILE] [--state-dir DIR]",
		summary:  "join this appliance to the cluster of the agent at URL (its cluster TLS listener; local, rackd stopped)",
		help: `Run it with rackd stopped. URL is a member agent's cluster TLS listener
(https://HOST:5241), trusted by the SHA-256 of the cluster CA that rackd
cluster init printed (--ca-sha256); --token (or RACKD_TOKEN) is an admin's
token of the cluster. This appliance makes its own keys; the agent signs
them, adds its etcd member (as a learner until it has caught up) and hands
over the cluster CA, credential.key and secrets.key, which every agent
shares. This appliance's own credential.key, secrets.key and admin.token are
kept as *.before-join; the token joined with becomes its admin.token. Its
rackd.db is no longer used. Then start rackd.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			var o memberFlags
			o.register(fs)
			fp := fs.String("ca-sha256", "", "the SHA-256 (hex) of the cluster CA's certificate, as rackd cluster init printed it")
			return func(e *env, args []string) error { return clusterJoin(e, args[0], *fp, &o) }
		},
	}
}

func clusterJoin(e *env, rawURL, fingerprint string, o *memberFlags) (err error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return usagef("URL %q: want the cluster TLS listener of a member, https://HOST:PORT", rawURL)
	}
	if fingerprint == "" {
		return usagef("--ca-sha256 is required: the cluster CA's fingerprint, printed by rackd cluster init")
	}
	token := e.g.token
	if token == "" {
		token = os.Getenv("RACKD_TOKEN")
	}
	if token == "" {
		// Not the local admin token file: this appliance's own admin
		// means nothing to the cluster.
		return usagef("--token (or RACKD_TOKEN) is required: an admin token of the cluster")
	}
	cfg, m, err := o.setup()
	if err != nil {
		return err
	}
	dir := agent.ClusterDir(cfg.StateDir)
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists: remove what an earlier attempt left first", dir)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	pubs, err := etcdmember.GenerateKeys(dir)
	if err != nil {
		return err
	}
	req := api.ClusterJoin{Name: m.Name, PeerURL: m.PeerURL, ClientURL: m.ClientURL, Hosts: []string{o.advertise}, Keys: map[string]string{}}
	for k, p := range pubs {
		req.Keys[string(k)] = string(p)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: etcdmember.PinnedTLS(fingerprint)}}
	c := client.New(strings.TrimRight(u.String(), "/"), token, client.WithHTTPClient(hc), client.WithUserAgent("rackd-cli/"+Version))
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
	defer cancel()
	resp, err := c.JoinCluster(ctx, req)
	if err != nil {
		return fmt.Errorf("cluster join: %w", err)
	}
	// From here on the cluster has this member: a failure says how to
	// take it out again.
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w (the cluster has %s as a member now: rackd cluster remove %s on a member, then join again)", err, m.Name, m.Name)
		}
	}()
	if err := etcdmember.WriteCA(dir, []byte(resp.CACert), []byte(resp.CAKey)); err != nil {
		return err
	}
	for _, k := range etcdmember.Kinds {
		if err := etcdmember.WriteCert(dir, k, []byte(resp.Certs[string(k)])); err != nil {
			return err
		}
	}
	if _, err := (etcdmember.Settings{Member: m, Dir: dir, DataDir: filepath.Join(cfg.StateDir, etcdmember.DataDir),
		InitialCluster: resp.InitialCluster, Existing: true}).Write(); err != nil {
		return err
	}
	for name, b := range map[string][]byte{agent.CredentialKeyFile: resp.CredentialKey, agent.SecretsKeyFile: resp.SecretsKey,
		agent.AdminTokenFile: []byte(token + "\n")} {
		if err := replaceKeeping(filepath.Join(cfg.StateDir, name), b); err != nil {
			return err
		}
	}
	if err := agent.WriteClusterOverlay(cfg.StateDir, agent.NewClusterOverlay(cfg.StateDir, resp.StoreURL, resp.EtcdPrefix, m.Name, o.listenTLS())); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "Joined as %s (members: %d). Start rackd now: its member catches up, then votes.\n", m.Name, len(resp.InitialCluster))
	return nil
}

// replaceKeeping writes b to path (0600), keeping what was there as
// path.before-join.
func replaceKeeping(path string, b []byte) error {
	if err := os.Rename(path, path+".before-join"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := atomicfile.WriteFile(path, b, atomicfile.Options{Perm: 0o600}); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func clusterRemoveVerb() *verb {
	return &verb{
		name:    "remove",
		args:    []string{"NAME"},
		summary: "remove the etcd member NAME from the cluster: a dead appliance, before its replacement joins (admin)",
		help: `Asks the agent (--url) to remove the member: etcd stops waiting for it, and
a quorum is counted without it. Remove a dead appliance's member before a
replacement joins, under the same name or another. An agent cannot remove
its own member: ask another appliance's.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, args []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.ClusterMember, error) {
					return c.RemoveClusterMember(ctx, args[0])
				}, func(w io.Writer, r api.ClusterMember) error {
					_, err := fmt.Fprintf(w, "Member %s removed from the cluster.\n", r.Name)
					return err
				})
			}
		},
	}
}

func clusterStatusVerb() *verb {
	return &verb{
		name:    "status",
		summary: "the agents sharing the store, the subnets and BMC shards each leads, the etcd members and their health (admin)",
		help: `On an agent with its own database file it says so: a single appliance, no
cluster. Exit status 0 either way; --json prints the API's answer.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			return func(e *env, _ []string) error {
				return callAndPrint(e, func(ctx context.Context, c *client.Client) (api.ClusterStatus, error) {
					return c.ClusterStatus(ctx)
				}, printClusterStatus)
			}
		},
	}
}

func printClusterStatus(w io.Writer, st api.ClusterStatus) error {
	if !st.Clustered {
		_, err := fmt.Fprintf(w, "Single appliance, no cluster: the store is %s.\n", st.Store)
		return err
	}
	fmt.Fprintf(w, "Store %s, answered by agent %s.\n\n", cell(st.Store), cell(st.Agent))
	tw := newTable(w)
	fmt.Fprintln(tw, "AGENT\tADVERTISE\tVERSION\tSTARTED\tSUBNETS (DHCP)\tPOWER SHARDS")
	for _, a := range st.Agents {
		shards := make([]string, len(a.PowerShards))
		for i, n := range a.PowerShards {
			shards[i] = strconv.Itoa(n)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(a.Name), cell(a.AdvertiseURL), cell(a.Version), when(a.Started),
			cells(a.Subnets), cells(shards))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "MEMBER\tID\tPEER URL\tCLIENT URL\tVOTES")
	for _, m := range st.Members {
		votes := "yes"
		if m.Learner {
			votes = "no (learner)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cell(m.Name), cell(m.ID), cells(m.PeerURLs), cells(m.ClientURLs), votes)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "ENDPOINT\tHEALTH\tMEMBER ID\tLEADER\tVERSION\tDB SIZE\tERROR")
	for _, e := range st.Endpoints {
		health, leader := "unhealthy", "-"
		if e.Healthy {
			health = "healthy"
		}
		if e.Leader {
			leader = "leader"
		}
		size := "-"
		if e.DBSize > 0 {
			size = strconv.FormatInt(e.DBSize, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(e.URL), health, cell(e.MemberID), leader, cell(e.Version), size, cell(e.Error))
	}
	return tw.Flush()
}
