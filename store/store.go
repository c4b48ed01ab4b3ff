package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"rackd/store/boltfile"
	"rackd/store/kv"
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
	// kv is the engine every operation runs on. shared is the same when
	// several writers share it (kv.Shared): the committer then commits
	// operations concurrently, one a transaction. db is the database file
	// when the store has one (Open): migrations, backups, copies and the
	// rollback copy are a file's (dbFile).
	kv     Engine
	shared kv.Shared
	db     *bolt.DB
	path   string
	opts   Options
	now    func() time.Time

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
	shared, _ := e.(kv.Shared)
	return &Store{kv: e, shared: shared, db: db, path: path, opts: opts, now: now, ipam: newIPAMState(opts.IPAM), credKey: credKey, tokens: newTokenState(), access: newSignal(),
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

// Close waits for queued writes to commit, then closes the file.
func (s *Store) Close() error {
	s.closeMu.Do(func() { close(s.stop) })
	<-s.stopped
	s.stopFollowing()
	db, err := s.dbFile()
	if err != nil {
		return nil // a shared engine's connection is its owner's to close
	}
	return db.Close()
}

// dbFile is the store's database file, for what only a file can do
// (backups, copies, migrations); a store on a shared engine has none, and
// the error says to use that engine's own tools.
func (s *Store) dbFile() (*bolt.DB, error) {
	if s.db == nil {
		return nil, errNoFileBackup
	}
	return s.db, nil
}

// Backup writes a consistent copy of the whole database to w while the store
// keeps serving (one read transaction; writers are not blocked).
func (s *Store) Backup(w io.Writer) (int64, error) {
	return s.WriteBackup(func(int64) io.Writer { return w })
}

// BackupSize is the size in bytes a backup will have.
func (s *Store) BackupSize() (int64, error) {
	db, err := s.dbFile()
	if err != nil {
		return 0, err
	}
	var n int64
	err = db.View(func(tx *bolt.Tx) error { n = tx.Size(); return nil })
	return n, err
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
