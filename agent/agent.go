// Package agent is rackd's composition root: it reads the configuration,
// opens the store, serves the HTTP API, /metrics and /healthz, and runs the
// background loops (lifecycle watchdog, release completion). Domain rules live
// in package store; the handlers here only translate HTTP to store calls.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"rackd/cluster"
	"rackd/images"
	"rackd/internal/atomicfile"
	"rackd/internal/consolelog"
	"rackd/internal/etcdmember"
	"rackd/internal/reqbody"
	"rackd/internal/seal"
	"rackd/maasapi"
	"rackd/netboot/arp"
	"rackd/netboot/dhcp"
	"rackd/netboot/dns"
	"rackd/netboot/files"
	"rackd/netboot/tftp"
	"rackd/power"
	"rackd/power/consolehub"
	"rackd/power/queue"
	"rackd/store"
	"rackd/webui"
)

// Version is rackd's version, set at build time with
// -ldflags "-X rackd/agent.Version=...".
var Version = "dev"

// AdminTokenFile is the admin token's name inside the state directory.
const AdminTokenFile = "admin.token"

// Agent is one running rackd.
type Agent struct {
	// meta is the state of the metadata endpoints (rate limits).
	meta *metadataState
	// phases are the series of commissioning, deployment and erase.
	phases *phaseMetrics
	osm    *osMetrics

	cfg   Config
	log   *slog.Logger
	store *store.Store
	// etcd is the store's etcd client (nil on a bbolt store), and cluster
	// this agent's part in the cluster of agents sharing it (nil: alone,
	// it leads everything).
	etcd    *clientv3.Client
	cluster *cluster.Node
	metrics *metrics
	// releases carries machines whose release was committed and whose
	// completion (power off, then READY) is due.
	releases chan string
	// power runs the machines' power requests through their drivers
	// (powerDrivers, by name); fakePower is the simulated BMCs of the "fake"
	// driver when [power.fake] enables it.
	power        *queue.Queue
	powerDrivers map[string]power.Driver
	fakePower    power.Driver
	// opts are New's options.
	opts       options
	powerClose []func() error
	// prober checks addresses before they are first handed out; nil when no
	// DHCP interface is configured.
	prober   Prober
	dns      *dns.Server
	tftp     *tftp.Server
	bootTree *files.Tree
	bootBase *bootBase
	bootHTTP http.Handler
	dhcp     *dhcp.Server
	arp      *arp.Set
	// images is the blob store of boot artefacts (<state dir>/images);
	// imagesMu serialises recording imports and deletes (see runImport);
	// imports are the import jobs; bootloaders is the table of
	// bootloader files served by name (refreshBootloaders).
	images      *images.Store
	imagesMu    sync.Mutex
	imports     *importJobs
	bootloaders atomic.Pointer[map[string]string]
	// closers undo New's steps (onClose).
	closers []closer
	// commitHook, when set, runs after every commit on the store's
	// committer goroutine (tests hold the committer with it).
	commitHook atomic.Pointer[func()]
	// applianceMu lets one appliance update or reset run at a time;
	// exitReq is the exit a request asked for (requestExit), stopServe
	// what makes a running Serve stop for it.
	applianceMu sync.Mutex
	exitReq     atomic.Pointer[ExitRequest]
	stopServe   atomic.Pointer[context.CancelCauseFunc]
	// serving is set once Serve has started everything it serves: an
	// error before it is a failed start (see serve's undo of the state
	// directory).
	serving atomic.Bool
	// api is the API's handler (Handler), built once; ui is the web UI
	// served beside it, whose actions go through api; routeAccess is the
	// route table's access levels, for the UI to ask.
	api         http.Handler
	ui          *webui.UI
	routeAccess *routeAccess
	// bodies is the budget of request bodies read at once, which the
	// API, the metadata and the web UI share.
	bodies *reqbody.Gate
	// maas serves MAAS's API 2.0 under maasapi.Prefix.
	maas *maasapi.Server
	// consoles holds the BMCs' serial console sessions (one per BMC),
	// shared by rackd console and the recorder, which keeps consoleLog
	// while machines are in a phase (console.go, consolerec.go).
	consoles   *consolehub.Hub
	consoleLog *consolelog.Log
	recorder   *recorder
	// rights ends the long-lived streams (consoles, the web UI's live
	// updates) whose right is lost (rights.go).
	rights *rights
	// member is this appliance's etcd member (cluster.etcd_member) and
	// memberName its name.
	member     *etcdmember.Process
	memberName string
	// blobFetcher brings image blobs from peer agents (nil: none).
	blobFetcher *images.Fetcher
}

// onCommit is told about every commit of the store.
func (a *Agent) onCommit(ops int, d time.Duration) {
	a.metrics.onCommit(ops, d)
	if h := a.commitHook.Load(); h != nil {
		(*h)()
	}
}

// Option changes how New builds an agent.
type Option func(*options)

type options struct {
	fakePower FakePowerDriver
}

// FakePowerDriver builds the driver behind [power.fake] (simulated BMCs,
// with latency per command, when log is set a log of every command that
// took effect, and when hangAfter is above 0 no answer after that many).
type FakePowerDriver func(latency time.Duration, log string, hangAfter int) (drv power.Driver, closeFn func() error, err error)

// WithFakePowerDriver gives the agent the driver behind [power.fake]. The
// shipped binary does not link the test driver (power/powertest) and has
// none: the agent's tests give it, and so does the rackd built with -tags
// rackd_fakepower for the tests that run the binary.
func WithFakePowerDriver(fn FakePowerDriver) Option {
	return func(o *options) { o.fakePower = fn }
}

// New opens the store under cfg.StateDir and, on a new database, creates the
// admin user and writes its token to <state dir>/admin.token (mode 0600).
// When a step fails, what the steps before it opened is closed again. A nil
// log discards.
func New(cfg Config, log *slog.Logger, opts ...Option) (_ *Agent, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		return nil, fmt.Errorf("create state directory %s: %w", cfg.StateDir, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	a := &Agent{cfg: cfg, log: log, opts: o, releases: make(chan string, 1024), meta: newMetadataState(cfg)}
	defer func() {
		if err != nil {
			if cerr := a.closeAll(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
	}()
	a.metrics = newMetrics(func() *store.Store { return a.store })
	a.phases = newPhaseMetrics(a.metrics.reg)
	a.osm = newOSMetrics(a.metrics.reg)
	if cfg.Cluster.EtcdMember {
		if err := a.startMember(cfg); err != nil {
			return nil, err
		}
	}
	credKey, err := loadCredentialKey(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	sticky := cfg.IPAM.StickyOnCommission
	s, err := a.openStore(cfg, store.Options{
		MaxBatch:      cfg.Store.MaxBatch,
		CommitTimeout: time.Duration(cfg.Store.CommitTimeout),
		CredentialKey: credKey,
		// The keyring sealing the BMC passwords lives beside the
		// credential key, outside the database and so outside its backups.
		Secrets:           seal.File{Path: filepath.Join(cfg.StateDir, SecretsKeyFile)},
		AcceptLostSecrets: cfg.Store.AcceptLostSecrets,
		OnCommit:          a.onCommit,
		IPAM: store.IPAMOptions{OfferHold: time.Duration(cfg.IPAM.OfferHold), PXELease: time.Duration(cfg.IPAM.PXELease),
			Quarantine: time.Duration(cfg.IPAM.Quarantine), StickyOnCommission: &sticky,
			LeaseCommitDelay: noneIfZero(cfg.DHCP.CommitDelay), LeaseCommitBatch: cfg.DHCP.CommitBatch},
	})
	if err != nil {
		return nil, err
	}
	a.store = s
	a.onClose("store", s.Close)
	if err := a.newCluster(cfg, a.etcd); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if cfg.DNS.Listen != "" {
		a.dns = dns.New(dns.Config{Listen: cfg.DNS.Listen, TTL: time.Duration(cfg.DNS.TTL)},
			dnsZone{s}, log.With("service", "dns"), a.metrics.reg)
	}
	if a.images, err = images.Open(filepath.Join(cfg.StateDir, "images")); err != nil {
		return nil, err
	}
	if a.cluster != nil && cfg.Cluster.EtcdMember {
		if err := a.newBlobFetcher(a.peerAgents); err != nil {
			return nil, fmt.Errorf("image blobs from peers: %w", err)
		}
	}
	// Import jobs write to the store: they stop before it closes.
	a.imports = newImportJobs()
	a.onClose("image imports", func() error { a.imports.Stop(); return nil })
	a.refreshBootloaders()
	a.onClose("boot tree", func() error {
		if a.bootTree == nil {
			return nil
		}
		return a.bootTree.Close()
	})
	bootFiles, err := a.newBootFiles(cfg)
	if err != nil {
		return nil, err
	}
	a.bootHTTP = newBootHTTP(bootFiles, a)
	if a.tftp, err = a.newTFTP(cfg, bootFiles); err != nil {
		return nil, fmt.Errorf("tftp: %w", err)
	}
	a.onClose("arp probers", func() error {
		if a.arp == nil {
			return nil
		}
		return a.arp.Close()
	})
	if a.dhcp, err = a.newDHCP(cfg); err != nil {
		return nil, fmt.Errorf("dhcp: %w", err)
	}
	// The drivers are closed once the power queue has stopped (Serve
	// returns from its loops before it closes anything).
	a.onClose("power drivers", func() error { a.closePower(); return nil })
	if err := a.newPower(cfg); err != nil {
		return nil, fmt.Errorf("power: %w", err)
	}
	a.rights = newRights(a.store, a.log.With("service", "rights"))
	if err := a.newConsoles(); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	if err := a.ensureAdmin(); err != nil {
		return nil, err
	}
	a.routeAccess = newRouteAccess()
	a.bodies = reqbody.NewGate(0, 0)
	if err := a.newUI(); err != nil {
		return nil, fmt.Errorf("web ui: %w", err)
	}
	a.maas, err = maasapi.New(a.store, maasOps{a}, maasapi.Options{Log: a.log.With("api", "maas"),
		MaxBodyBytes: cfg.API.MaxBodyBytes, Version: Version,
		Unavailable: func(err error) bool { return a.etcd != nil && etcdUnavailable(err) }, Bodies: a.bodies})
	if err != nil {
		return nil, err
	}
	a.api = a.newHandler()
	return a, nil
}

// onClose registers fn to undo a step of New: closeAll runs the functions in
// the reverse order of their registration, so what was opened last is
// closed first.
func (a *Agent) onClose(what string, fn func() error) {
	a.closers = append(a.closers, closer{what, fn})
}

// closeAll closes everything New opened, once.
func (a *Agent) closeAll() error {
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i].fn(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", a.closers[i].what, err))
		}
	}
	a.closers = nil
	return errors.Join(errs...)
}

type closer struct {
	what string
	fn   func() error
}

// Store gives tests and tools access to the agent's store.
func (a *Agent) Store() *store.Store { return a.store }

// AdminTokenPath is where the admin token is written.
func (a *Agent) AdminTokenPath() string { return filepath.Join(a.cfg.StateDir, AdminTokenFile) }

// ensureAdmin creates the first admin on a database without users. The token
// file is written (and synced) before the user is committed: a crash between
// the two leaves a stale file that the next start overwrites, never an admin
// whose token nobody has.
func (a *Agent) ensureAdmin() error {
	has, err := a.store.HasUsers()
	if err != nil {
		return fmt.Errorf("read users: %w", err)
	}
	path := a.AdminTokenPath()
	if has {
		data, err := os.ReadFile(path)
		if err != nil {
			a.log.Warn("admin token file is missing; use an existing admin's token, or rackd serve --rotate-admin-token, to get another", "path", path)
			return nil
		}
		if _, ok, err := a.store.Authenticate(strings.TrimSpace(string(data))); err == nil && !ok {
			a.log.Warn("the admin token file's token no longer works (revoked or expired); rackd serve --rotate-admin-token writes a new one", "path", path)
			return nil
		}
		a.log.Info("admin token", "path", path)
		return nil
	}
	token := store.NewToken()
	if err := atomicfile.WriteFile(path, []byte(token+"\n"), atomicfile.Options{Perm: 0o600}); err != nil {
		return fmt.Errorf("write admin token: %w", err)
	}
	if _, _, err := a.store.CreateUser(context.Background(), store.System, adminUser, true, token); err != nil {
		return fmt.Errorf("create admin user: %w", err)
	}
	a.log.Info("created the admin user; its token is in the admin token file", "path", path)
	return nil
}

// Serve answers the API on ln and runs the background loops until ctx is
// done, then shuts down gracefully: requests in flight get
// api.shutdown_timeout to finish, queued writes are committed, the store is
// closed. Serve closes the store: an Agent serves once.
func (a *Agent) Serve(ctx context.Context, ln net.Listener) error {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	a.stopServe.Store(&stop)
	if e := a.exitReq.Load(); e != nil {
		stop(e)
	}
	srv := &http.Server{
		Handler:           a.Handler(),
		ReadHeaderTimeout: time.Duration(a.cfg.API.ReadTimeout),
		ReadTimeout:       time.Duration(a.cfg.API.ReadTimeout),
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	a.bootBase.serving(ln.Addr())
	tlsLn, err := a.listenClusterTLS()
	if err != nil {
		return errors.Join(err, a.closeAll())
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})
	if tlsLn != nil {
		g.Go(func() error {
			if err := srv.Serve(tlsLn); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("cluster tls listener: %w", err)
			}
			return nil
		})
		a.log.Info("cluster tls listener", "url", "https://"+tlsLn.Addr().String())
	}
	g.Go(func() error { a.syncEndpoints(gctx); return nil })
	g.Go(func() error {
		<-gctx.Done()
		// Imports are cancelled, not waited for: they roll back.
		a.imports.Stop()
		// The web UI's live streams never end by themselves: they are
		// closed, not waited for.
		a.ui.Hub().Close()
		sctx, cancel := context.WithTimeout(context.Background(), time.Duration(a.cfg.API.ShutdownTimeout))
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			a.log.Warn("requests still running at shutdown were cut off", "err", err)
			srv.Close()
		}
		return nil
	})
	if a.dhcp != nil {
		g.Go(func() error {
			if err := a.dhcp.Serve(gctx); err != nil && gctx.Err() == nil {
				return fmt.Errorf("dhcp: %w", err)
			}
			return nil
		})
		a.log.Info("dhcp serving", "interfaces", a.cfg.DHCP.Interfaces, "listen", a.cfg.DHCP.Listen)
	}
	if a.tftp != nil {
		g.Go(func() error {
			if err := a.tftp.Serve(gctx); err != nil && gctx.Err() == nil {
				return fmt.Errorf("tftp: %w", err)
			}
			return nil
		})
	}
	if a.dns != nil {
		g.Go(func() error {
			if err := a.dns.Serve(gctx); err != nil {
				return fmt.Errorf("dns: %w", err)
			}
			return nil
		})
		go func() {
			select {
			case <-a.dns.Ready():
				a.log.Info("dns serving", "addr", a.dns.Addr().String())
			case <-gctx.Done():
			}
		}()
	}
	g.Go(func() error { a.rights.run(gctx); return nil })
	g.Go(func() error { a.watchdog(gctx); return nil })
	g.Go(func() error { a.releaser(gctx); return nil })
	g.Go(func() error { return a.power.Run(gctx) })
	if a.cluster != nil {
		g.Go(func() error { return a.runCluster(gctx) })
	}
	if a.store.ImagesChanged() != nil {
		g.Go(func() error { a.followImages(gctx); return nil })
	}
	// It ends the console sessions as it stops: their connections are
	// hijacked, which the HTTP server's shutdown does not wait for.
	g.Go(func() error { a.recorder.run(gctx); return nil })
	a.warnBootReach(ln.Addr())
	// Serving means every socket is bound: a port taken fails the start
	// here, before rackd says it serves.
	for _, ready := range a.socketsReady() {
		select {
		case <-ready:
		case <-gctx.Done():
			err = g.Wait()
			err = errors.Join(err, a.closeAll())
			a.log.Info("rackd stopped")
			return err
		}
	}
	a.serving.Store(true)
	a.log.Info("rackd serving", "url", "http://"+ln.Addr().String(), "version", Version,
		"state_dir", a.cfg.StateDir, "admin_token", a.AdminTokenPath())
	err = g.Wait()
	err = errors.Join(err, a.closeAll())
	a.log.Info("rackd stopped")
	// Stopped for a request's exit (an appliance reboot): the caller exits
	// with its code, the store closed by now.
	if e := a.exitReq.Load(); e != nil && errors.Is(context.Cause(ctx), e) {
		if err != nil {
			return errors.Join(e, err)
		}
		return e
	}
	return err
}

// socketsReady is the channels closed once each of the agent's sockets
// beside the API's is bound.
func (a *Agent) socketsReady() []<-chan struct{} {
	var out []<-chan struct{}
	if a.dhcp != nil {
		out = append(out, a.dhcp.Ready())
	}
	if a.tftp != nil {
		out = append(out, a.tftp.Ready())
	}
	if a.dns != nil {
		out = append(out, a.dns.Ready())
	}
	return out
}

// Close releases what New opened (the store, probers, drivers) for an agent
// that never served.
func (a *Agent) Close() error { return a.closeAll() }

// watchdog fails machines stuck in COMMISSIONING or DEPLOYING and resumes
// releases that a restart interrupted.
func (a *Agent) watchdog(ctx context.Context) {
	t := time.NewTicker(time.Duration(a.cfg.Lifecycle.WatchdogInterval))
	defer t.Stop()
	for {
		a.sweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sweep is one round of the watchdog. Its outcome is counted, so that a
// watchdog that keeps failing (or stops) can be alerted on; a sweep cut
// short by shutdown is not counted.
func (a *Agent) sweep(ctx context.Context) {
	failed := false
	defer func() {
		switch {
		case ctx.Err() != nil:
		case failed:
			a.metrics.watchdogSweeps.WithLabelValues("error").Inc()
		default:
			a.metrics.watchdogSweeps.WithLabelValues("ok").Inc()
		}
	}()
	expired, err := a.store.Expire(ctx, store.Timeouts{Commissioning: time.Duration(a.cfg.Lifecycle.CommissioningTimeout),
		Deploying: time.Duration(a.cfg.Lifecycle.DeployingTimeout), Releasing: time.Duration(a.cfg.Lifecycle.ReleasingTimeout)})
	if err != nil && ctx.Err() == nil {
		failed = true
		a.log.Error("watchdog", "err", err)
	}
	for _, e := range expired {
		if e.Phase != "" {
			a.phases.failures.WithLabelValues(e.Phase, "timeout").Inc()
			a.phases.duration.WithLabelValues(e.Phase, "failed").Observe(e.Timeout.Seconds())
		}
		a.metrics.watchdogExpired.WithLabelValues(string(e.From)).Inc()
		a.log.Warn("machine timed out", "machine", e.Machine.ID, "hostname", e.Machine.Hostname, "from", e.From, "to", e.Machine.State)
	}
	if n, err := a.store.ExpireAddresses(ctx); err != nil && ctx.Err() == nil {
		failed = true
		a.log.Error("expire leases", "err", err)
	} else if n > 0 {
		a.log.Debug("expired leases and quarantines removed", "count", n)
	}
	releasing, err := a.store.ListMachines(store.Filter{State: store.StateReleasing})
	if err != nil {
		failed = true
		a.log.Error("list releasing machines", "err", err)
		return
	}
	for _, m := range releasing {
		select {
		case a.releases <- m.ID:
		default: // the releaser is busy; the next sweep tries again
		}
	}
}

// releaser completes releases: RELEASING -> READY, once the power queue has
// powered the machine off (the RELEASING policy queued that, and
// FinishRelease queues it again for a release that has nothing open and is
// not known off); a machine without a power driver has nothing to wait for.
// The store decides and completes in one transaction (FinishRelease); a
// failed power-off fails the release there (FinishPower), and the
// watchdog's releasing timeout bounds the rest (Expire).
func (a *Agent) releaser(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-a.releases:
			res, err := a.store.FinishRelease(ctx, id, func(driver string) bool { return a.powerDrivers[driver] != nil })
			m := res.Machine
			switch {
			case err == nil && res.Wait == store.WaitPowerOff:
				a.log.Info("release queued the power-off it waits for", "machine", m.ID, "hostname", m.Hostname, "request", res.Queued,
					"last_request", res.Power.LastRequest, "outcome", res.Power.LastOutcome, "observed", res.Power.Observed)
			case err == nil && res.Wait != "":
				// The erase's report (or the watchdog), or the power
				// queue, which sends id again when done, moves it on.
			case err == nil:
				a.metrics.transitions.WithLabelValues(string(store.ActionReleaseDone)).Inc()
				a.log.Info("machine released", "machine", m.ID, "hostname", m.Hostname)
			case store.CodeOf(err) == store.CodeInvalidTransition, store.CodeOf(err) == store.CodeNotFound:
				// Already completed (a sweep and a release raced) or deleted.
			case ctx.Err() == nil:
				a.log.Error("complete release", "machine", id, "err", err)
			}
		}
	}
}

// noneIfZero maps a configured duration whose "0s" means none
// (dhcp.commit_delay, dhcp.read_coalesce) to an option where 0 means "the
// default" and a negative value "none".
func noneIfZero(d Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return time.Duration(d)
}
