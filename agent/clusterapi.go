package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"rackd/api"
	"rackd/cluster"
	"rackd/internal/etcdmember"
	"rackd/store"
)

// joinTimeout bounds a join's member addition (etcd takes a new learner
// only while its leader is in touch with every member).
const joinTimeout = 60 * time.Second

// clusterCA is this agent's cluster CA, or an answer saying why there is
// none.
func (a *Agent) clusterCA(w http.ResponseWriter) (*etcdmember.CA, bool) {
	if a.etcd == nil || a.member == nil {
		writeError(w, http.StatusConflict, api.CodeNotClustered,
			"this agent runs no etcd member of its own (rackd cluster init makes one): it cannot add members")
		return nil, false
	}
	ca, err := etcdmember.LoadCA(ClusterDir(a.cfg.StateDir))
	if err != nil {
		writeError(w, http.StatusConflict, api.CodeNotClustered, err.Error())
		return nil, false
	}
	return ca, true
}

// joinCluster adds a new appliance: signs its certificates, adds its
// member to etcd (as a learner, which it promotes once it has caught up),
// and hands it the CA and the keys every agent shares.
func (a *Agent) joinCluster(w http.ResponseWriter, r *http.Request, who store.Actor) {
	// The answer carries secrets.key and the CA key: never in clear.
	if r.TLS == nil {
		writeError(w, http.StatusForbidden, api.CodeForbidden,
			"join through the cluster's TLS listener (cluster.listen_tls, https://), not the plain API")
		return
	}
	ca, ok := a.clusterCA(w)
	if !ok {
		return
	}
	var req api.ClusterJoin
	if err := a.decodeBody(w, r, &req, false); err != nil {
		return
	}
	m := etcdmember.Member{Name: req.Name, PeerURL: strings.TrimSuffix(req.PeerURL, "/"), ClientURL: strings.TrimSuffix(req.ClientURL, "/")}
	if err := m.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, api.CodeBadRequest, err.Error())
		return
	}
	// Sign first: a refused key adds no member.
	certs := map[string]string{}
	for _, k := range etcdmember.Kinds {
		pub, err := etcdmember.ParsePublicKey([]byte(req.Keys[string(k)]))
		if err != nil {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("keys.%s: %v", k, err))
			return
		}
		c, err := ca.Issue(k, m.Name, pub, append(m.Hosts(), req.Hosts...))
		if err != nil {
			writeError(w, http.StatusBadRequest, api.CodeBadRequest, err.Error())
			return
		}
		certs[string(k)] = string(c)
	}
	dir := ClusterDir(a.cfg.StateDir)
	caKey, err := os.ReadFile(filepath.Join(dir, etcdmember.CAKey))
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	credKey, err := os.ReadFile(filepath.Join(a.cfg.StateDir, CredentialKeyFile))
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	secrets, err := os.ReadFile(a.SecretsKeyPath())
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), joinTimeout)
	defer cancel()
	list, err := a.etcd.MemberList(ctx)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, fmt.Sprintf("list the etcd members: %v", err))
		return
	}
	initial, err := etcdmember.Add(ctx, a.etcd, m)
	if err != nil {
		writeError(w, http.StatusConflict, api.CodeConflict, err.Error())
		return
	}
	hosts := []string{hostPort(m.ClientURL)}
	for _, o := range list.Members {
		for _, u := range o.ClientURLs {
			if hp := hostPort(u); !slices.Contains(hosts, hp) {
				hosts = append(hosts, hp)
			}
		}
	}
	a.log.Info("cluster member added", "member", m.Name, "peer_url", m.PeerURL, "client_url", m.ClientURL, "by", who.Name)
	writeJSON(w, http.StatusCreated, api.ClusterJoined{
		CACert: string(ca.PEM), CAKey: string(caKey), Certs: certs, InitialCluster: initial,
		StoreURL: "etcds://" + strings.Join(hosts, ","), EtcdPrefix: a.cfg.Store.EtcdPrefix,
		CredentialKey: credKey, SecretsKey: secrets,
	})
}

// hostPort is the HOST:PORT of an https:// URL.
func hostPort(u string) string {
	if pu, err := url.Parse(u); err == nil && pu.Host != "" {
		return pu.Host
	}
	return u
}

// removeMember removes an etcd member: how a dead appliance leaves before
// its replacement joins.
func (a *Agent) removeMember(w http.ResponseWriter, r *http.Request, who store.Actor) {
	if a.etcd == nil {
		writeError(w, http.StatusConflict, api.CodeNotClustered, "this agent is not on an etcd cluster")
		return
	}
	name := r.PathValue("name")
	if name == a.memberName {
		writeError(w, http.StatusConflict, api.CodeConflict,
			fmt.Sprintf("%s is this agent's own member: remove it through another appliance's agent", name))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
	defer cancel()
	if err := etcdmember.Remove(ctx, a.etcd, name); err != nil {
		if errors.Is(err, etcdmember.ErrNoMember) {
			writeError(w, http.StatusNotFound, api.CodeNotFound, err.Error())
			return
		}
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, err.Error())
		return
	}
	a.log.Info("cluster member removed", "member", name, "by", who.Name)
	writeJSON(w, http.StatusOK, api.ClusterMember{Name: name})
}

// clusterStatus is the agents, their leaderships and the etcd cluster, or
// on a database file the plain statement that there is no cluster.
func (a *Agent) clusterStatus(w http.ResponseWriter, r *http.Request, _ store.Actor) {
	if a.etcd == nil || a.cluster == nil {
		writeJSON(w, http.StatusOK, api.ClusterStatus{Store: filepath.Join(a.cfg.StateDir, store.FileName),
			Message: "single appliance, no cluster: the store is this agent's database file",
			Agents:  []api.ClusterAgent{}, Members: []api.EtcdMember{}, Endpoints: []api.ClusterEndpoint{}})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	st, err := cluster.Status(ctx, a.etcd, a.cfg.Store.EtcdPrefix)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, err.Error())
		return
	}
	out := api.ClusterStatus{Clustered: true, Store: a.cfg.Store.URL, Agent: a.cluster.Name(),
		Agents: []api.ClusterAgent{}, Members: []api.EtcdMember{}, Endpoints: []api.ClusterEndpoint{}}
	byName := map[string]int{}
	for _, ag := range st.Agents {
		byName[ag.Name] = len(out.Agents)
		out.Agents = append(out.Agents, api.ClusterAgent{Name: ag.Name, AdvertiseURL: ag.AdvertiseURL, Version: ag.Version,
			Started: ag.Started, Subnets: []string{}, PowerShards: []int{}})
	}
	for _, l := range st.DHCP {
		if i, ok := byName[l.Agent]; ok {
			out.Agents[i].Subnets = append(out.Agents[i].Subnets, l.Key)
		}
	}
	for _, l := range st.Power {
		if i, ok := byName[l.Agent]; ok {
			if n, err := strconv.Atoi(l.Key); err == nil {
				out.Agents[i].PowerShards = append(out.Agents[i].PowerShards, n)
			}
		}
	}
	for _, e := range st.Endpoints {
		ce := api.ClusterEndpoint{URL: e.URL, MemberID: e.MemberID, Version: e.Version, Leader: e.Leader, DBSize: e.DBSize,
			Healthy: e.Err == "" && len(e.Errors) == 0, Error: e.Err}
		if ce.Error == "" && len(e.Errors) > 0 {
			ce.Error = strings.Join(e.Errors, "; ")
		}
		out.Endpoints = append(out.Endpoints, ce)
	}
	if list, err := a.etcd.MemberList(ctx); err == nil {
		for _, m := range list.Members {
			out.Members = append(out.Members, api.EtcdMember{ID: strconv.FormatUint(m.ID, 16), Name: m.Name,
				PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, Learner: m.IsLearner})
		}
	}
	writeJSON(w, http.StatusOK, out)
}
