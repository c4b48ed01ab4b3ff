package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"rackd/store/kv"
)

// errNoFileBackup is a backup asked of a store on another engine than its
// bbolt file: that engine has its own (etcd: a snapshot).
var errNoFileBackup = errors.New("backup: this store runs on an engine that is not a rackd database file; back the engine up with its own tools (etcd: etcdctl snapshot save)")

// OpenEngine opens the store on engine e (an etcd cluster:
// store/kv/etcdkv), called name in messages. An engine that holds no rackd
// data is initialised at this build's schema: what a new database file
// holds, made in a temporary directory and copied in (migrations are
// bbolt's). One at another schema is refused.
//
// On such an engine the store is one writer among possibly several: every
// operation still runs in one transaction with its rules inside it, and the
// engine makes transactions serialisable. On an engine whose commits have
// revisions (etcdkv), the in-memory state (the subnets cache, the MAC
// index) is loaded here at one revision and then follows every writer's
// commits through a watch from the next (follow.go); on another, it is
// loaded once and kept from this store's own commits only.
func OpenEngine(e Engine, name string, opts Options) (*Store, error) {
	if opts.ReadOnly {
		return nil, errors.New("store: a read-only store is a database file's (Open)")
	}
	if opts.MaxBatch <= 0 {
		// One operation per transaction: a batch's reads and writes add
		// up against the engine's per-transaction limits, and one
		// operation's conflict would rerun all of them.
		opts.MaxBatch = 1
	}
	opts.defaults()
	have, err := engineSchema(e, opts)
	if err != nil {
		return nil, fmt.Errorf("read the schema of %s: %w", name, err)
	}
	if have == 0 {
		if err := initEngine(e, opts); err != nil {
			return nil, fmt.Errorf("initialise %s: %w", name, err)
		}
		if have, err = engineSchema(e, opts); err != nil {
			return nil, fmt.Errorf("read the schema of %s: %w", name, err)
		}
	}
	if have != SchemaVersion {
		return nil, fmt.Errorf("%s has schema %d, this rackd has %d: migrate it offline (rackd store migrate) with the rackd that matches", name, have, SchemaVersion)
	}
	// The write queue keeps its usual depth: one operation per
	// transaction is no reason to hold fewer waiting.
	s := newStore(e, nil, name, opts, 1000)
	if err := s.openKeys(); err != nil {
		return nil, fmt.Errorf("the BMC secrets' keyring of %s: %w", name, err)
	}
	if re, ok := e.(kv.Follower); ok {
		if err := s.startFollowing(re); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	} else {
		s.ipam.refreshSubnets(s.viewKV)
		if err := s.ipam.loadMACs(s.viewKV); err != nil {
			return nil, fmt.Errorf("load the MAC index from %s: %w", name, err)
		}
	}
	go s.commitLoop()
	if err := s.indexPowerHistory(context.Background()); err != nil {
		s.Close()
		return nil, fmt.Errorf("%s: index the power requests by machine: %w", name, err)
	}
	return s, nil
}

func engineSchema(e Engine, opts Options) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opts.CommitTimeout)
	defer cancel()
	var v int
	err := e.View(ctx, func(tx kv.Tx) error {
		v = schemaOf(tx)
		return nil
	})
	return v, err
}

// initEngine copies a new database file's contents into e.
func initEngine(e Engine, opts Options) error {
	dir, err := os.MkdirTemp("", "rackd-store-init-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fresh, err := Open(filepath.Join(dir, FileName), Options{})
	if err != nil {
		return err
	}
	defer fresh.Close()
	ctx, cancel := context.WithTimeout(context.Background(), opts.CommitTimeout)
	defer cancel()
	_, err = fresh.CopyTo(ctx, e)
	return err
}

// copyChunk is how many keys one transaction of CopyTo writes: below
// etcd's default limit of 128 operations per transaction, with room for
// the bucket's own keys.
const copyChunk = 64

// CopyTo copies every bucket of this store's database file, keys and
// counters, into engine dst, in transactions of copyChunk keys, and
// returns how many keys it copied. The schema marker is copied last, so an
// engine left half copied (a crash) reads as not initialised. The store
// should be quiet (offline): the copy is of one read snapshot.
func (s *Store) CopyTo(ctx context.Context, dst Engine) (int, error) {
	db, err := s.dbFile()
	if err != nil {
		return 0, fmt.Errorf("copy: %w", err)
	}
	n := 0
	err = db.View(func(src *bolt.Tx) error {
		copyBucket := func(name []byte, b *bolt.Bucket) error {
			c := b.Cursor()
			k, v := c.First()
			for {
				var keys, vals [][]byte
				for ; k != nil && len(keys) < copyChunk; k, v = c.Next() {
					keys, vals = append(keys, k), append(vals, v)
				}
				last := k == nil
				err := dst.Update(ctx, func(tx kv.Tx) error {
					d, err := tx.CreateBucketIfNotExists(name)
					if err != nil {
						return err
					}
					for i := range keys {
						if err := d.Put(keys[i], vals[i]); err != nil {
							return err
						}
					}
					if last {
						return d.SetSequence(b.Sequence())
					}
					return nil
				})
				if err != nil {
					return fmt.Errorf("copy bucket %s: %w", name, err)
				}
				n += len(keys)
				if last {
					return nil
				}
			}
		}
		if err := src.ForEach(func(name []byte, b *bolt.Bucket) error {
			if string(name) == string(bucketMeta) {
				return nil
			}
			return copyBucket(name, b)
		}); err != nil {
			return err
		}
		if meta := src.Bucket(bucketMeta); meta != nil {
			return copyBucket(bucketMeta, meta)
		}
		return nil
	})
	return n, err
}

// MigrateInto copies src's database file into engine dst, which must hold
// no rackd data, and returns how many keys it copied. Open dst with
// OpenEngine afterwards and Check it.
func MigrateInto(ctx context.Context, src *Store, dst Engine) (int, error) {
	have, err := engineSchema(dst, src.opts)
	if err != nil {
		return 0, fmt.Errorf("read the target's schema: %w", err)
	}
	if have != 0 {
		return 0, fmt.Errorf("the target already holds rackd data (schema %d): migrate into an empty cluster, or under another prefix", have)
	}
	return src.CopyTo(ctx, dst)
}
