package store

import (
	"encoding/json"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"rackd/internal/seal"
	"rackd/store/boltfile"
	"rackd/store/kv"
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
