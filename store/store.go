package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"rackd/internal/seal"
	"rackd/store/kv"
	"rackd/store/boltfile"
	"rackd/store/kv/etcdkv"
)

// FileName is the database's name inside the state directory.
const FileName = boltfile.FileName

// Bucket names. Indexes (hostnames, macs, tokens) map a unique key to the
// primary key and are kept in the same transaction as the record.
var (
	bucketMeta        = boltfile.MetaBucket
	bucketMachines    = []byte("machines")    // id -> Machine
	bucketHostnames   = []byte("hostnames")   // hostname -> id
	bucketMACs        = []byte("macs")        // mac -> id
	bucketAllocations = []byte("allocations") // schema 1-2 only: machine id -> Allocation
	bucketUsers       = []byte("users")       // name -> User
	bucketTokens      = []byte("tokens")      // token hash -> token id (schema 1-7: -> user name)
	bucketAPITokens   = []byte("api_tokens")  // token id -> Token
	bucketEvents      = []byte("events")      // machine id NUL seq -> Event
	bucketFree        = []byte("free")        // hostname -> id of READY, unheld machines
	bucketSubnets     = []byte("subnets")     // prefix (16-byte address + bits) -> Subnet
	bucketAddresses   = []byte("addresses")   // 16-byte IP -> Address: every address in use, one use each
	bucketAddrByMAC   = []byte("addr_by_mac") // schema 4-6 only: mac NUL 16-byte IP -> nothing
	bucketImages      = []byte("images")      // name "/" arch -> Image
	// On an engine shared with other agents only: mac -> the 16-byte IPs
	// of the address records bound to it, one after the other (see
	// bindLeaseKey). Made by the first binding.
	bucketLeaseMACs = []byte("lease_macs")

	keySchema = boltfile.SchemaKey
	// keyScrub is set while the file may hold, on its free pages, secrets
	// written in clear by an older schema: Open then rewrites the file.
	keyScrub = []byte("scrub_free_pages")
)

// migrateEnv is what a migration may need besides the transaction.
type migrateEnv struct {
	// secrets is the keyring that seals BMC secrets (schema 11).
	secrets *seal.Keyring
}

// migrations[i] moves a database from schema version i to i+1. Append only:
// a released migration is never edited.
var migrations = []func(env *migrateEnv, tx *bolt.Tx) error{
	// 0 -> 1: the first schema.
	func(_ *migrateEnv, tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketMachines, bucketHostnames, bucketMACs,
			bucketAllocations, bucketUsers, bucketTokens, bucketEvents} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("create bucket %s: %w", b, err)
			}
		}
		return nil
	},
	// 1 -> 2: the free index, so that allocation does not scan every machine.
	func(_ *migrateEnv, tx *bolt.Tx) error {
		free, err := tx.CreateBucketIfNotExists(bucketFree)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketMachines).ForEach(func(k, v []byte) error {
			var m Machine
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("decode machine %s: %w", k, err)
			}
			if isFree(m) {
				return free.Put([]byte(m.Hostname), []byte(m.ID))
			}
			return nil
		})
	},
	// 2 -> 3: allocations move into their machine's record (one write per
	// allocation instead of two, and one allocation per machine by
	// construction).
	func(_ *migrateEnv, tx *bolt.Tx) error {
		allocs := tx.Bucket(bucketAllocations)
		if allocs == nil {
			return nil
		}
		machines := tx.Bucket(bucketMachines)
		err := allocs.ForEach(func(k, v []byte) error {
			var a Allocation
			if err := json.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("decode allocation %s: %w", k, err)
			}
			var m Machine
			data := machines.Get(k)
			if data == nil {
				return fmt.Errorf("allocation %s names no machine", k)
			}
			if err := json.Unmarshal(data, &m); err != nil {
				return fmt.Errorf("decode machine %s: %w", k, err)
			}
			m.Allocation = &a
			out, err := json.Marshal(m)
			if err != nil {
				return err
			}
			return machines.Put(k, out)
		})
		if err != nil {
			return err
		}
		return tx.DeleteBucket(bucketAllocations)
	},
	// 3 -> 4: address management.
	func(_ *migrateEnv, tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketSubnets, bucketAddresses, bucketAddrByMAC} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("create bucket %s: %w", b, err)
			}
		}
		return nil
	},
	// 4 -> 5: the images registry.
	func(_ *migrateEnv, tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketImages); err != nil {
			return fmt.Errorf("create bucket %s: %w", bucketImages, err)
		}
		return nil
	},
	// 5 -> 6: the power queue's requests and each machine's desired and
	// observed power (machines without a record take their state's policy).
	func(_ *migrateEnv, tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketPowerRequests, bucketPowerOpen, bucketPowerState} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("create bucket %s: %w", b, err)
			}
		}
		return nil
	},
	// 6 -> 7: the MAC index of addresses lives in memory, rebuilt from the
	// addresses on open (an ACK no longer dirties a random page of it).
	func(_ *migrateEnv, tx *bolt.Tx) error {
		if tx.Bucket(bucketAddrByMAC) == nil {
			return nil
		}
		return tx.DeleteBucket(bucketAddrByMAC)
	},
	// 7 -> 8: a user holds named tokens, each a record of its own; the
	// token a user had becomes one named "default" (its secret is not
	// known, only its hash, which is all a token record keeps).
	func(_ *migrateEnv, tx *bolt.Tx) error {
		toks, err := tx.CreateBucketIfNotExists(bucketAPITokens)
		if err != nil {
			return fmt.Errorf("create bucket %s: %w", bucketAPITokens, err)
		}
		index, users := tx.Bucket(bucketTokens), tx.Bucket(bucketUsers)
		type userV7 struct {
			User
			TokenHash string `json:"token_hash"`
		}
		var old []userV7
		err = users.ForEach(func(k, v []byte) error {
			var u userV7
			if err := json.Unmarshal(v, &u); err != nil {
				return fmt.Errorf("decode user %s: %w", k, err)
			}
			old = append(old, u)
			return nil
		})
		if err != nil {
			return err
		}
		for _, u := range old {
			if data, err := json.Marshal(u.User); err != nil {
				return err
			} else if err := users.Put([]byte(u.Name), data); err != nil {
				return err
			}
			if u.TokenHash == "" {
				continue
			}
			tk := Token{ID: newTokenID(), User: u.Name, Name: DefaultTokenName, Hash: u.TokenHash, Created: u.Created}
			data, err := json.Marshal(tk)
			if err != nil {
				return err
			}
			if err := toks.Put([]byte(tk.ID), data); err != nil {
				return err
			}
			if err := index.Put([]byte(tk.Hash), []byte(tk.ID)); err != nil {
				return err
			}
		}
		return nil
	},
	// 8 -> 9: users' SSH public keys.
	func(_ *migrateEnv, tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketSSHKeys); err != nil {
			return fmt.Errorf("create bucket %s: %w", bucketSSHKeys, err)
		}
		return nil
	},
	// 9 -> 10: deployment records and their user-data. A machine
	// DEPLOYING or DEPLOYED before has none: its deployment ends as it
	// would have (the image written is the end).
	func(_ *migrateEnv, tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketDeployments, bucketUserData} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("create bucket %s: %w", b, err)
			}
		}
		return nil
	},
	// 10 -> 11: BMC passwords are sealed under the secrets keyring
	// (secrets.go); the pages that held them in clear are scrubbed once
	// the migration is committed (keyScrub).
	migrateSealPasswords,
}

// SchemaVersion is the schema this build of rackd writes: one more than
// the last of migrations (TestSchemaVersionCountsMigrations).
const SchemaVersion = boltfile.SchemaVersion

// Options tune a store. The zero value is usable.
type Options struct {
	// LockTimeout is how long Open waits for another process's lock on the
	// file before giving up. Default 1s.
	LockTimeout time.Duration
	// MaxBatch caps how many operations share one commit. Default 1000.
	// A store on a shared engine (OpenEngine) commits each operation alone.
	MaxBatch int
	// MaxInFlight caps how many operations a store on a shared engine
	// (OpenEngine) runs at once, each in a transaction of its own, so
	// that their commits share the engine's round trips (etcd's Raft
	// batches) instead of queueing one behind the other. Default 64.
	// A database file has one writer: its group commit is unchanged.
	MaxInFlight int
	// ReadOnly opens the file for reading only (offline backup, checks).
	ReadOnly bool
	// CommitTimeout bounds one transaction on the engine (an engine across
	// the network may not answer). Default 30 s.
	CommitTimeout time.Duration
	// Now replaces the clock (tests).
	Now func() time.Time
	// OnCommit, when set, is told the size and duration of every commit
	// (from several goroutines at once on a shared engine: MaxInFlight).
	OnCommit func(ops int, d time.Duration)
	// IPAM tunes address management; zero fields take the defaults of
	// DefaultIPAM.
	IPAM IPAMOptions
	// CredentialKey derives the phase credentials of machines being
	// commissioned, deployed or erased (phases.go). It must stay outside
	// the database and the same across restarts; nil draws a random one,
	// which makes the tokens of machines mid-phase invalid after a restart.
	CredentialKey []byte
	// Secrets keeps the keyring that seals the machines' BMC secrets
	// (secrets.go), outside the database; it is created on first open.
	// nil keeps one in memory for as long as the store is open.
	Secrets KeyStore
	// AcceptLostSecrets opens a database whose secrets were sealed under
	// keys the keyring does not hold (restored without its keyring file):
	// those machines' power then fails, with an error naming them, until
	// their secrets are set again. Without it, Open refuses such a file.
	AcceptLostSecrets bool
}

// Store is the rack's database. Its methods are safe for concurrent use.
type Store struct {
	// kv is the engine every operation runs on; db is the same as a bbolt
	// file, nil on another engine (migrations, backups and the rollback
	// copy are bbolt's).
	kv   Engine
	db   *bolt.DB
	path string
	opts Options
	now  func() time.Time

	ipam *ipamState

	ops     chan *op
	stop    chan struct{}
	stopped chan struct{}
	// urgent wakes a committer that sleeps to a commit deadline (nudge).
	urgent chan struct{}
	// waiting counts the operations queued and not yet taken into a
	// commit (nudge).
	waiting atomic.Int64
	closeMu sync.Once

	// powerNotify is told about machines with new power requests.
	powerNotify atomic.Pointer[func(machine string)]
	// eventNotify is told about every machine event once it is committed
	// (OnEvent).
	eventNotify atomic.Pointer[func(Event)]
	// consoleTail is Store.ConsoleTail's function when one is set.
	consoleTail atomic.Pointer[func(machine string) []byte]
	// answered is called after each commit has answered its operations
	// (OnAnswered).
	answered atomic.Pointer[func()]
	// credKey is Options.CredentialKey (or a random one).
	credKey []byte
	// tokens is what is kept in memory about API tokens (tokens.go).
	tokens *tokenState
	// access fires when a token or a user goes (AccessChanged).
	access *signal
	// keys is the keyring sealing BMC secrets (secrets.go).
	keys *keyState
	// follow keeps the in-memory state up with the engine's other
	// writers (follow.go); nil on a database file.
	follow *follower
}

// op is one write waiting for the committer.
type op struct {
	ctx   context.Context
	fn    func(*Tx) error
	done  chan error
	delay time.Duration // how long it may wait for others to share its commit
	batch int           // for at most this many (0: no bound but MaxBatch)
	group string        // on a shared engine, who it shares commits with (see patience)
	// then, when set, is called with the outcome instead of sending it on
	// done, on the committer's goroutine (see updateAsync).
	then func(error)
}

// answer reports the operation's outcome to whoever waits for it.
func (o *op) answer(err error) {
	if o.then != nil {
		o.then(err)
		return
	}
	o.done <- err
}

// Open opens (creating if needed) the database at path and brings its schema
// up to date. It fails fast, with a message that says what to do, when the
// file is locked by another process, corrupt, or newer than this build.
func Open(path string, opts Options) (*Store, error) {
	opts.defaults()
	if !opts.ReadOnly {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, fmt.Errorf("create state directory: %w", err)
		}
	}
	db, err := openBolt(path, opts)
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, fmt.Errorf("database %s is locked: another rackd (or a backup) is using this state directory: %w", path, err)
	case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrChecksum),
		errors.Is(err, bolterrors.ErrVersionMismatch), errors.Is(err, errCorrupt),
		// bbolt has no sentinel for a file cut short before its second meta page.
		err != nil && strings.Contains(err.Error(), "file size too small"):
		return nil, corrupt(path, err)
	case err != nil:
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	s := newStore(boltEngine{db}, db, path, opts, opts.MaxBatch)
	if err := guard(s.openKeys); err != nil {
		db.Close()
		if errors.Is(err, errCorrupt) {
			return nil, corrupt(path, err)
		}
		return nil, err
	}
	if err := guard(s.migrate); err != nil {
		s.db.Close()
		if errors.Is(err, errCorrupt) {
			return nil, corrupt(path, err)
		}
		return nil, err
	}
	if err := s.scrubIfNeeded(); err != nil {
		s.db.Close()
		return nil, err
	}
	// The scrub may have rewritten and reopened the file.
	db = s.db
	s.kv = boltEngine{db}
	s.ipam.refreshSubnets(s.viewKV)
	if err := guard(func() error { return s.ipam.loadMACs(s.viewKV) }); err != nil {
		db.Close()
		return nil, corrupt(path, err)
	}
	if opts.ReadOnly {
		close(s.stopped)
		return s, nil
	}
	go s.commitLoop()
	s.resumeRotation()
	if err := s.indexPowerHistory(context.Background()); err != nil {
		s.Close()
		return nil, fmt.Errorf("database %s: index the power requests by machine: %w", path, err)
	}
	return s, nil
}

// defaults fills in the options left zero.
func (o *Options) defaults() {
	if o.LockTimeout <= 0 {
		o.LockTimeout = time.Second
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 1000
	}
	if o.CommitTimeout <= 0 {
		o.CommitTimeout = 30 * time.Second
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 64
	}
}

// newStore is a store on engine e (db: the same as a bbolt file, or nil)
// whose write queue holds queue operations, its committer not started.
func newStore(e Engine, db *bolt.DB, path string, opts Options, queue int) *Store {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	credKey := opts.CredentialKey
	if len(credKey) == 0 {
		credKey = newCredentialKey()
	}
	return &Store{kv: e, db: db, path: path, opts: opts, now: now, ipam: newIPAMState(opts.IPAM), credKey: credKey, tokens: newTokenState(), access: newSignal(),
		ops: make(chan *op, queue), stop: make(chan struct{}), stopped: make(chan struct{}),
		urgent: make(chan struct{}, 1)}
}

func corrupt(path string, err error) error {
	return fmt.Errorf("database %s is corrupt or not a rackd database (restore it from a backup or move it away): %w", path, err)
}

// guard runs fn, turning bbolt's panics and faults on a damaged file into
// errCorrupt (boltfile.Guard).
func guard(fn func() error) error { return boltfile.Guard(fn) }

// errCorrupt marks a file that bbolt cannot safely read.
var errCorrupt = boltfile.ErrCorrupt

// openBolt opens the database file safely (boltfile.Open).
func openBolt(path string, opts Options) (*bolt.DB, error) {
	return boltfile.Open(path, opts.LockTimeout, opts.ReadOnly)
}

// Path is the database file's path.
func (s *Store) Path() string { return s.path }

func (s *Store) migrate() error {
	var have int
	err := s.db.View(func(tx *bolt.Tx) error {
		have = schemaOf(kv.Bolt(tx))
		return nil
	})
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if have > SchemaVersion {
		return fmt.Errorf("database %s has schema %d, newer than this rackd understands (%d): run a newer rackd", s.path, have, SchemaVersion)
	}
	if have == SchemaVersion {
		return nil
	}
	if s.opts.ReadOnly {
		return fmt.Errorf("database %s has schema %d and needs migrating to %d: open it read-write once", s.path, have, SchemaVersion)
	}
	// A rollback to the rackd that wrote the old schema needs a database it
	// can open (rollback.go). A new database (schema 0) has nothing to keep.
	if have > 0 {
		if err := s.keepSchemaCopy(have); err != nil {
			return err
		}
	}
	// All migrations run in one transaction: a crash leaves the old schema.
	return s.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		env := &migrateEnv{secrets: s.keys.current()}
		for v := have; v < SchemaVersion; v++ {
			if err := migrations[v](env, tx); err != nil {
				return fmt.Errorf("migrate schema %d -> %d: %w", v, v+1, err)
			}
		}
		return meta.Put(keySchema, []byte(strconv.Itoa(SchemaVersion)))
	})
}

func schemaOf(tx kv.Tx) int {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return 0
	}
	v, err := strconv.Atoi(string(meta.Get(keySchema)))
	if err != nil {
		return 0
	}
	return v
}

// Close waits for queued writes to commit, then closes the file.
func (s *Store) Close() error {
	s.closeMu.Do(func() { close(s.stop) })
	<-s.stopped
	s.stopFollowing()
	if s.db == nil {
		return nil // the engine's connection is its owner's to close
	}
	return s.db.Close()
}

// Backup writes a consistent copy of the whole database to w while the store
// keeps serving (one read transaction; writers are not blocked).
func (s *Store) Backup(w io.Writer) (int64, error) {
	if s.db == nil {
		return 0, errNoFileBackup
	}
	var n int64
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	if err != nil {
		return n, fmt.Errorf("backup: %w", err)
	}
	return n, nil
}

// BackupSize is the size in bytes a backup will have.
func (s *Store) BackupSize() (int64, error) {
	if s.db == nil {
		return 0, errNoFileBackup
	}
	var n int64
	err := s.db.View(func(tx *bolt.Tx) error { n = tx.Size(); return nil })
	return n, err
}

// Tx is one operation's view of a write transaction. Operations must check
// every rule before their first write; see the package doc.
type Tx struct {
	tx    kv.Tx
	now   time.Time
	dirty bool
	ipam  *ipamState
	// buckets caches bucket handles (see bucket).
	buckets [4]struct {
		name []byte
		b    kv.Bucket
	}
	// after runs once the transaction's writes are durable (or, for an
	// operation that wrote nothing, once it has run): in-memory state that
	// readers outside the committer consult must not move ahead of what
	// they can see in the database.
	after []func()
	// powerKicks lists machines this operation queued power requests for.
	powerKicks []string
	// credKey derives phase credentials (phases.go).
	credKey []byte
	// keys seals BMC secrets (secrets.go).
	keys *keyState
	// onEvent is Store.OnEvent's function when one is set.
	onEvent func(Event)
	// consoleTail is Store.ConsoleTail's function when one is set.
	consoleTail func(machine string) []byte
	// commit is what the hooks learn of the commit (nil in a view).
	commit *commitInfo
	// macs is the MAC each address this operation wrote ends with, on an
	// engine with other writers (setMAC).
	macs map[netip.Addr]string
}

// OnEvent sets the function told about every machine event (a transition,
// an edit, a power failure...) after the commit that made it durable, never
// inside the transaction: it runs on the committer's goroutine, so it must
// return at once (the web UI's live updates hand it to a buffered fan-out).
// On a shared engine it is also told of the events other agents commit,
// from the watch's goroutine, and it may be called from several goroutines
// at once (MaxInFlight). nil removes it.
func (s *Store) OnEvent(fn func(Event)) {
	if fn == nil {
		s.eventNotify.Store(nil)
		return
	}
	s.eventNotify.Store(&fn)
}

// ConsoleTail sets the function that gives the end of a machine's console
// log: the event of a machine's move to FAILED_COMMISSIONING or
// FAILED_DEPLOYMENT carries it (Event.Console), so that a failed phase can be
// debugged after the fact. It runs inside the transaction, on the
// committer's goroutine (on a shared engine, on several at once): it must
// be quick (a few KiB read from a file). nil removes it.
func (s *Store) ConsoleTail(fn func(machine string) []byte) {
	if fn == nil {
		s.consoleTail.Store(nil)
		return
	}
	s.consoleTail.Store(&fn)
}

func (s *Store) consoleTailHook() func(string) []byte {
	if fn := s.consoleTail.Load(); fn != nil {
		return *fn
	}
	return nil
}

func (s *Store) eventHook() func(Event) {
	if fn := s.eventNotify.Load(); fn != nil {
		return *fn
	}
	return nil
}

// afterCommit runs fn once this operation's outcome is committed.
func (t *Tx) afterCommit(fn func()) { t.after = append(t.after, fn) }

// update runs fn in the next group commit and returns once that commit is
// durable (or fn refused). A cancelled ctx stops the operation only if it has
// not started: once fn has run, its outcome is reported whatever ctx says.
func (s *Store) update(ctx context.Context, fn func(*Tx) error) error {
	return s.updateLazy(ctx, patience{}, fn)
}

// patience is how long an operation may wait for others to share its
// commit: until delay after the previous commit ended, and only while fewer
// than batch operations wait (0: no bound but MaxBatch).
//
// On a shared engine (OpenEngine) operations commit alone, except those of
// one group, which read the same records and would conflict if they
// committed side by side: one commit of a group is in flight at a time,
// carrying the group's operations queued behind it (commitConcurrently).
type patience struct {
	delay time.Duration
	batch int
	group string
}

// The groups of operations that share commits on a shared engine.
const (
	groupLease    = "lease"    // DHCP acknowledgements
	groupAllocate = "allocate" // allocations, which all want the first free machine
)

// updateLazy is update for an operation that may wait for others to share
// its commit (see patience). A DHCP server acknowledging a few thousand
// leases a second pays one fsync'd commit per lease when each commits at
// once; spacing commits a few milliseconds apart under load lets many share
// one, at a latency no DHCP client notices (they wait seconds), while a
// lone lease after a quiet spell commits at once. Once batch of them wait,
// the commit starts at once: at high rates commits follow each other
// back to back, each taking what arrived during the one before. An
// operation with no delay (an API call) ends the wait of the batch it joins.
func (s *Store) updateLazy(ctx context.Context, p patience, fn func(*Tx) error) error {
	if s.opts.ReadOnly {
		// Nobody reads s.ops: queueing would wait forever.
		return ErrReadOnly
	}
	o := &op{ctx: ctx, fn: fn, done: make(chan error, 1), delay: p.delay, batch: p.batch, group: p.group}
	select {
	case <-s.stop:
		return ErrClosed
	default:
	}
	select {
	case s.ops <- o:
		s.nudgeFor(o)
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return ErrClosed
	}
	// When Close races with this call, the select above may queue o after the
	// committer's last look at s.ops. The committer answers every op it took
	// before it closes s.stopped, so an op still unanswered then never will be.
	select {
	case err := <-o.done:
		return err
	case <-s.stopped:
		select {
		case err := <-o.done:
			return err
		default:
			return ErrClosed
		}
	}
}

// updateAsync is updateLazy without the wait: fn is queued and then is
// called with its outcome once that is durable (or fn refused), on the
// committer's goroutine, so then must be quick and must not block (a DHCP
// server sends its reply there, saving a goroutine hand-off per lease; on
// a shared engine several operations' then may run at once). It
// returns an error, and then is never called, when fn could not be queued.
// An operation queued as the store closes may never run; its then is not
// called either.
func (s *Store) updateAsync(ctx context.Context, p patience, fn func(*Tx) error, then func(error)) error {
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	return s.enqueue(&op{ctx: ctx, fn: fn, delay: p.delay, batch: p.batch, group: p.group, then: then}, true)
}

// QueuedWrites is the number of writes waiting for the committer.
func (s *Store) QueuedWrites() int { return len(s.ops) }

// tryUpdateAsync is updateAsync for bookkeeping that is dropped rather than
// waited for when the write queue is full.
func (s *Store) tryUpdateAsync(delay time.Duration, fn func(*Tx) error, then func(error)) error {
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	return s.enqueue(&op{ctx: context.Background(), fn: fn, delay: delay, then: then}, false)
}

// enqueue hands o to the committer. When the queue is full it waits for
// room (until o's context ends or the store closes) if wait is set, and
// otherwise gives up with errQueueFull.
func (s *Store) enqueue(o *op, wait bool) error {
	select {
	case <-s.stop:
		return ErrClosed
	default:
	}
	if !wait {
		select {
		case s.ops <- o:
			s.nudgeFor(o)
			return nil
		default:
			return errQueueFull
		}
	}
	select {
	case s.ops <- o:
		s.nudgeFor(o)
		return nil
	case <-o.ctx.Done():
		return o.ctx.Err()
	case <-s.stop:
		return ErrClosed
	}
}

var errQueueFull = errors.New("store: write queue full")

// nudgeFor wakes the committer for a queued operation that cannot wait, or
// that makes the operations waiting as many as it waits for at most, or
// when the queue is half full: patient operations do not wake it one by
// one while it sleeps to its commit deadline.
func (s *Store) nudgeFor(o *op) {
	n := s.waiting.Add(1)
	if o.delay <= 0 || (o.batch > 0 && n >= int64(o.batch)) || len(s.ops) >= cap(s.ops)/2 {
		select {
		case s.urgent <- struct{}{}:
		default:
		}
	}
}

func (s *Store) commitLoop() {
	if s.db == nil {
		s.commitConcurrently()
		return
	}
	defer close(s.stopped)
	batch := make([]*op, 0, s.opts.MaxBatch)
	// lastEnd is when the previous commit finished. Patient operations
	// wait for company only until lastEnd + their delay: after a quiet
	// spell one commits at once, and under load commits are spaced by the
	// delay, each taking everything that arrived meanwhile.
	var lastEnd time.Time
	for {
		select {
		case o := <-s.ops:
			batch = append(batch[:0], o)
			// A nudge from before this batch is stale: what it was for
			// is queued, and the drain below sees it.
			select {
			case <-s.urgent:
			default:
			}
		case <-s.stop:
			// Finish what was queued before Close: it was promised an answer.
			for {
				select {
				case o := <-s.ops:
					s.commit([]*op{o})
				default:
					return
				}
			}
		}
		// Take what is queued; then, if every operation so far can wait,
		// wait (up to the least patient one's delay after the previous
		// commit, while fewer wait than it waits for) for company.
		wait, upTo := batch[0].delay, bound(batch[0].batch, s.opts.MaxBatch)
		var timer *time.Timer
	drain:
		for len(batch) < s.opts.MaxBatch {
			select {
			case o := <-s.ops:
				batch = append(batch, o)
				wait = min(wait, o.delay)
				upTo = min(upTo, bound(o.batch, s.opts.MaxBatch))
				continue
			default:
			}
			if wait <= 0 || len(batch) >= upTo {
				break
			}
			left := time.Until(lastEnd.Add(wait))
			if left <= 0 {
				break
			}
			if timer == nil {
				timer = time.NewTimer(left)
			}
			// Sleep to the deadline. Patient operations queue in s.ops
			// meanwhile without waking the committer one by one (a wake-up
			// per lease cost more CPU than the lease's share of the
			// commit); an impatient one, or a queue filling up, nudges.
			select {
			case <-timer.C:
				wait = 0 // take what queued, then commit
			case <-s.urgent:
				// Take what queued; an impatient operation makes wait 0.
			case <-s.stop:
				break drain
			}
		}
		if timer != nil {
			timer.Stop()
		}
		// Operations queued from here on wait for the next commit.
		s.waiting.Add(-int64(len(batch)))
		s.commit(batch)
		lastEnd = time.Now()
	}
}

// commitConcurrently is the committer of a store on a shared engine: each
// operation runs in a transaction of its own as soon as one of
// MaxInFlight slots is free, so that many are in flight at once. The
// engine keeps them serialisable (a conflict reruns one); each is answered
// after its own commit and hooks, as in a group commit.
//
// Operations of a group (DHCP acknowledgements, allocations) are the
// exception: at most patientInFlight commits of a group are in flight,
// and each takes, with the operation that starts it, the group's
// operations queued behind it (up to its batch bound, under the same
// fence). A commit through the engine's consensus costs about the same for
// one record as for thirty, so at a few thousand leases a second one
// commit per lease would be what limits the rate; allocations, which all
// take the first free machine, would conflict with each other side by
// side, and in one commit run one after the other instead. At a trickle
// each still commits at once, alone.
func (s *Store) commitConcurrently() {
	defer close(s.stopped)
	var wg sync.WaitGroup
	// A slot is taken before an operation leaves the queue, so that what
	// waits for one stays counted there (QueuedWrites).
	slots := make(chan struct{}, s.opts.MaxInFlight)
	groupSlots := map[string]chan struct{}{}
	// held is an operation taken from the queue that could not join the
	// batch before it: it goes first next time.
	var held *op
	run := func(o *op) {
		batch := []*op{o}
		var groupSlot chan struct{}
		if o.group != "" {
			if groupSlot = groupSlots[o.group]; groupSlot == nil {
				groupSlot = make(chan struct{}, patientInFlight)
				groupSlots[o.group] = groupSlot
			}
			groupSlot <- struct{}{} // meanwhile, company queues up
			for limit := bound(o.batch, maxShared[o.group]); len(batch) < limit && held == nil; {
				select {
				case next := <-s.ops:
					if next.group == o.group && sameFence(o, next) {
						batch = append(batch, next)
					} else {
						held = next
					}
					continue
				default:
				}
				break
			}
		}
		s.waiting.Add(-int64(len(batch)))
		wg.Go(func() {
			defer func() {
				if groupSlot != nil {
					<-groupSlot
				}
				<-slots
			}()
			s.commit(batch)
		})
	}
	take := func() (*op, bool) {
		if o := held; o != nil {
			held = nil
			return o, true
		}
		select {
		case o := <-s.ops:
			return o, true
		default:
			return nil, false
		}
	}
	for {
		select {
		case slots <- struct{}{}:
		case <-s.stop:
			slots <- struct{}{}
		}
		if o, ok := take(); ok {
			run(o)
			continue
		}
		select {
		case o := <-s.ops:
			run(o)
			continue
		case <-s.stop:
		}
		// Finish what was queued before Close: it was promised an answer,
		// and s.stopped closes only once every one has it.
		for {
			o, ok := take()
			if !ok {
				<-slots
				wg.Wait()
				return
			}
			run(o)
			slots <- struct{}{}
		}
	}
}

// patientInFlight bounds the commits of one group in flight at once on a
// shared engine (maxShared: how many operations one takes, within the
// engine's per-transaction limit; a commit over it is split, see commit).
// One commit of up to sixty acknowledgements at a time
// measured best on a three-member etcd (when sixty fitted in one: before
// each new lease also wrote its client's lease_macs key): at 3200 leases a
// second, four commits of up to 24 in flight kept offers at 3.4 ms and
// acks at 14.8 ms, two of up to 40 at 2.1 and 10.9 ms, one of up to 60 at
// 1.6 and 9.0 ms; while one commits, the next batch fills, so fewer and
// larger commits cost the engine less consensus per lease.
const patientInFlight = 1

// maxShared is, per group, how many operations one commit takes: thirty
// acknowledgements (a new lease: the address record and its client's
// lease_macs key, each compared and written; a renewal three of those) or
// sixteen allocations (a machine, its event, its allocation record, their
// comparisons) stay within etcd's default 128 operations a transaction
// (one over it is split in halves).
var maxShared = map[string]int{groupLease: 30, groupAllocate: 16}

// sameFence reports whether a and b may share a commit: one commit
// checks one fence.
func sameFence(a, b *op) bool {
	fa, _ := kv.FenceFrom(a.ctx)
	fb, _ := kv.FenceFrom(b.ctx)
	return fa == fb
}

// bound is an operation's batch bound, 0 meaning max.
func bound(batch, max int) int {
	if batch <= 0 {
		return max
	}
	return min(batch, max)
}

// errReplay aborts a shared transaction whose operation failed after writing.
var errReplay = errors.New("store: operation failed after writing; replaying alone")

// errNothingWritten rolls back a batch that changed nothing.
var errNothingWritten = errors.New("store: nothing written")

// OnAnswered registers fn, called on the committer's goroutine once each
// commit has answered all its operations (called the then of every
// asynchronous one): a caller that answers its own clients from then (the
// DHCP server's ACKs) can hold what it sends there and send it all in fn,
// in one system call. fn must be quick and must not block. On a shared
// engine commits run concurrently (MaxInFlight): fn is called once after
// each, from several goroutines at once, each call after that commit's
// answers. It replaces the function registered before; nil removes it.
func (s *Store) OnAnswered(fn func()) {
	if fn == nil {
		s.answered.Store(nil)
		return
	}
	s.answered.Store(&fn)
}

// commit runs batch in one transaction and answers every op after the commit.
func (s *Store) commit(batch []*op) {
	defer func() {
		if fn := s.answered.Load(); fn != nil {
			(*fn)()
		}
	}()
	if len(batch) > 1 && s.db == nil && slices.ContainsFunc(batch[1:], func(o *op) bool { return !sameFence(batch[0], o) }) {
		// Each fence is its own operation's condition: a shared commit
		// carries only one.
		for _, o := range batch {
			s.commit1(o)
		}
		return
	}
	start := time.Now()
	results := make([]error, len(batch))
	wrote := false
	var after []func()
	ctx, cancel := s.commitContext(batch[0])
	defer cancel()
	err := s.engineUpdate(ctx, func(tx kv.Tx, c *commitInfo) error {
		// An engine may run this function again (a conflict): start over.
		clear(results)
		wrote, after = false, after[:0]
		now := s.now().UTC()
		for i, o := range batch {
			if err := o.ctx.Err(); err != nil {
				results[i] = err
				continue
			}
			t := s.newTx(tx, now, c)
			if err := runOp(func(t *Tx) error { return s.checkCaller(o.ctx, t) }, t); err != nil {
				results[i] = err
				continue
			}
			err := runOp(o.fn, t)
			if err != nil && t.dirty {
				return errReplay
			}
			results[i] = err
			wrote = wrote || t.dirty
			if err == nil {
				after = append(after, t.after...)
			}
		}
		if !wrote {
			// Only refusals and no-ops: a commit would cost two fsyncs for
			// nothing.
			return errNothingWritten
		}
		return nil
	})
	if errors.Is(err, errNothingWritten) {
		runAll(after)
		for i, o := range batch {
			o.answer(results[i])
		}
		return
	}
	if errors.Is(err, etcdkv.ErrTooLarge) && len(batch) > 1 {
		// Over the engine's per-transaction limit together: in halves.
		s.commit(batch[:len(batch)/2])
		s.commit(batch[len(batch)/2:])
		return
	}
	if errors.Is(err, errReplay) {
		// Rare: replay each op in a transaction of its own so that the
		// failing one rolls back alone.
		for _, o := range batch {
			s.commit1(o)
		}
		return
	}
	if err == nil {
		runAll(after)
		s.ipam.refreshSubnets(s.viewKV)
	}
	if s.opts.OnCommit != nil {
		s.opts.OnCommit(len(batch), time.Since(start))
	}
	for i, o := range batch {
		// A failed transaction fails every operation of it, a refusal
		// too: an engine's failed read may be what it was refused on.
		if err != nil {
			results[i] = s.unavailable(fmt.Errorf("commit: %w", err))
		}
		o.answer(results[i])
	}
}

func (s *Store) commit1(o *op) {
	if err := o.ctx.Err(); err != nil {
		o.answer(err)
		return
	}
	var result error
	var t *Tx
	now := s.now().UTC()
	ctx, cancel := s.commitContext(o)
	defer cancel()
	err := s.engineUpdate(ctx, func(tx kv.Tx, c *commitInfo) error {
		t = s.newTx(tx, now, c) // afresh if the engine runs this again
		if result = runOp(func(t *Tx) error { return s.checkCaller(o.ctx, t) }, t); result != nil {
			return result
		}
		result = runOp(o.fn, t)
		return result
	})
	if err != nil && (result == nil || !errors.Is(err, result)) {
		// Not the operation's own refusal: the engine failed (see commit).
		result = s.unavailable(fmt.Errorf("commit: %w", err))
	}
	if err == nil {
		runAll(t.after)
		s.ipam.refreshSubnets(s.viewKV)
	}
	o.answer(result)
}

// commitContext is the context of the engine's transaction for o: o's own
// values (its fence, kv.WithFence), so that the engine checks what the
// operation relies on in the same commit, but not its cancellation (once
// the operation runs its outcome is reported whatever its caller does),
// and bounded by CommitTimeout.
func (s *Store) commitContext(o *op) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(o.ctx), s.opts.CommitTimeout)
}

// newTx is one operation's view of the engine's transaction tx.
func (s *Store) newTx(tx kv.Tx, now time.Time, c *commitInfo) *Tx {
	return &Tx{tx: tx, now: now, ipam: s.ipam, credKey: s.credKey, keys: s.keys, onEvent: s.eventHook(), consoleTail: s.consoleTailHook(), commit: c}
}

// commitInfo is what the operations of one engine transaction learn of
// its commit, in their after-commit hooks.
type commitInfo struct {
	// shared: the engine has other writers (follow.go).
	shared bool
	// rev is the commit's revision on such an engine (0: nothing was
	// committed).
	rev int64
}

// engineUpdate runs fn in one read-write transaction of the engine, giving
// it the commitInfo its hooks will read. On an engine with other writers
// the commit's revision is recorded as the store's own before the hooks
// run (follower.end).
func (s *Store) engineUpdate(ctx context.Context, fn func(kv.Tx, *commitInfo) error) error {
	f := s.follow
	var c *commitInfo
	run := func(tx kv.Tx) error {
		c = &commitInfo{shared: f != nil} // afresh for each run
		return fn(tx, c)
	}
	if f == nil {
		return s.kv.Update(ctx, run)
	}
	ticket := f.begin()
	f.alone.RLock()
	rev, err := f.e.TryUpdateRev(ctx, run)
	f.alone.RUnlock()
	if errors.Is(err, etcdkv.ErrConflict) {
		// Run again with none of this store's transactions beside it
		// (other agents' may still conflict: the engine reruns it then).
		f.alone.Lock()
		rev, err = f.e.UpdateRev(ctx, run)
		f.alone.Unlock()
	}
	if err != nil {
		rev = 0
	}
	if c != nil {
		c.rev = rev
	}
	f.end(ticket, rev)
	return err
}

func runAll(fns []func()) {
	for _, fn := range fns {
		fn()
	}
}

// runOp turns a panic in an operation into an error so that one bad request
// cannot take the committer (and every waiter) down.
func runOp(fn func(*Tx) error, t *Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			t.dirty = true // be safe: replay alone
			err = fmt.Errorf("store: operation panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return fn(t)
}

// viewFunc runs fn in a read transaction of the engine.
type viewFunc func(fn func(kv.Tx) error) error

// viewKV runs fn in a read transaction of the engine, bounded by
// CommitTimeout (an engine across the network may not answer).
func (s *Store) viewKV(fn func(kv.Tx) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.CommitTimeout)
	defer cancel()
	return s.unavailable(s.kv.View(ctx, fn))
}

// view runs fn in a read transaction.
func (s *Store) view(fn func(*Tx) error) error {
	return s.viewKV(func(tx kv.Tx) error { return fn(s.readTx(tx)) })
}

// viewMirrored is view for an advisory read whose outcome a later write
// checks: on an engine that keeps the records in memory it reads them
// there, maybe a little behind (kv.WithMirroredReads).
func (s *Store) viewMirrored(fn func(*Tx) error) error {
	ctx, cancel := context.WithTimeout(kv.WithMirroredReads(context.Background()), s.opts.CommitTimeout)
	defer cancel()
	return s.unavailable(s.kv.View(ctx, func(tx kv.Tx) error { return fn(s.readTx(tx)) }))
}

func (s *Store) readTx(tx kv.Tx) *Tx {
	return &Tx{tx: tx, now: s.now().UTC(), ipam: s.ipam, credKey: s.credKey, keys: s.keys}
}

// Engine is a kv engine the store runs on: its bbolt file (Open), or
// another (OpenEngine). See package kv for what an engine guarantees.
type Engine interface {
	// Update runs fn in a read-write transaction, committed durably when
	// fn returns nil; fn may run more than once.
	Update(ctx context.Context, fn func(kv.Tx) error) error
	// View runs fn in a read-only transaction on one snapshot.
	View(ctx context.Context, fn func(kv.Tx) error) error
}

// boltEngine is the store's bbolt file as an Engine. bbolt has no
// context: its transactions are local and bounded by the disk.
type boltEngine struct{ db *bolt.DB }

func (e boltEngine) Update(_ context.Context, fn func(kv.Tx) error) error {
	return e.db.Update(func(tx *bolt.Tx) error { return fn(kv.Bolt(tx)) })
}

func (e boltEngine) View(_ context.Context, fn func(kv.Tx) error) error {
	return e.db.View(func(tx *bolt.Tx) error { return fn(kv.Bolt(tx)) })
}

// get decodes the value at key into v; it reports whether the key exists.
// bucket returns the named top-level bucket. Handles are kept for the
// operation: in a read transaction bbolt looks a bucket up (a seek and an
// allocation) on every Tx.Bucket call, and a DHCP offer reads the addresses
// bucket several times.
func (t *Tx) bucket(name []byte) kv.Bucket {
	for i := range t.buckets {
		c := &t.buckets[i]
		if c.b == nil {
			b := t.tx.Bucket(name)
			if b != nil { // a bucket created later in the transaction is found then
				c.name, c.b = name, b
			}
			return b
		}
		if bytes.Equal(c.name, name) {
			return c.b
		}
	}
	return t.tx.Bucket(name)
}

func (t *Tx) get(bucket, key []byte, v any) (bool, error) {
	data := t.bucket(bucket).Get(key)
	if data == nil {
		return false, nil
	}
	// json.Unmarshal copies: nothing returned aliases the mmap.
	if err := json.Unmarshal(data, v); err != nil {
		return true, fmt.Errorf("decode %s/%s: %w", bucket, key, err)
	}
	return true, nil
}

func (t *Tx) put(bucket, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s/%s: %w", bucket, key, err)
	}
	t.dirty = true
	return t.bucket(bucket).Put(key, data)
}

func (t *Tx) putRaw(bucket, key, value []byte) error {
	t.dirty = true
	return t.bucket(bucket).Put(key, value)
}

func (t *Tx) getRaw(bucket, key []byte) []byte {
	v := t.bucket(bucket).Get(key)
	if v == nil {
		return nil
	}
	return append([]byte(nil), v...)
}

func (t *Tx) del(bucket, key []byte) error {
	t.dirty = true
	return t.bucket(bucket).Delete(key)
}

func (t *Tx) nextSeq(bucket []byte) (uint64, error) {
	t.dirty = true
	return t.tx.Bucket(bucket).NextSequence()
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}
