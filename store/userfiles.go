package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// User files: small named files a user keeps in rackd, each user in a
// namespace of their own (MAAS's file storage, where Juju keeps its
// provider state). Nobody reads, lists or deletes another user's files, an
// admin included: a name means the caller's own file.
//
// The metadata (UserFile) and the content are records of two buckets, so
// that listing reads no content. Both buckets are created by the first
// file stored, not by a migration: a database where nobody stored a file
// has neither, and readers treat a missing bucket as no files.
var (
	bucketUserFiles    = []byte("user_files")     // user NUL name -> UserFile
	bucketUserFileData = []byte("user_file_data") // user NUL name -> content
)

// Bounds of user files. A file is one record of the store, and on a shared
// engine one transaction, which etcd bounds (1.5 MiB a request by default):
// 1 MiB leaves room for the rest of the transaction. Juju's provider state
// is a few hundred bytes.
const (
	MaxUserFileSize  = 1 << 20
	MaxUserFiles     = 1000
	MaxUserFileBytes = 64 << 20
	maxUserFileName  = 255
)

// UserFile describes one stored file (its content is read separately).
type UserFile struct {
	Owner string `json:"owner"`
	Name  string `json:"name"`
	// Key is the file's unguessable identifier (a random UUID), by which
	// its owner may also fetch it.
	Key     string    `json:"key"`
	Size    int64     `json:"size"`
	SHA256  string    `json:"sha256"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

func userFileKey(user, name string) []byte { return []byte(user + "\x00" + name) }

// CheckUserFileName says what is wrong with a file name, if anything:
// 1 to 255 bytes of UTF-8, no control characters.
func CheckUserFileName(name string) error {
	switch {
	case name == "":
		return errorf(CodeInvalid, "the file name is empty")
	case len(name) > maxUserFileName:
		return errorf(CodeInvalid, "the file name is %d bytes long: at most %d", len(name), maxUserFileName)
	case !utf8.ValidString(name):
		return errorf(CodeInvalid, "the file name is not UTF-8")
	case strings.ContainsFunc(name, unicode.IsControl):
		return errorf(CodeInvalid, "the file name %q holds a control character", name)
	}
	return nil
}

func newFileKey() string {
	var b [16]byte
	rand.Read(b[:])         // never fails (crypto/rand panics instead)
	b[6] = b[6]&0x0f | 0x40 // a version 4 UUID, as MAAS's keys are
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// userFilesOf returns user's files whose names start with prefix, by name.
func (t *Tx) userFilesOf(user, prefix string) ([]UserFile, error) {
	b := t.tx.Bucket(bucketUserFiles)
	if b == nil {
		return nil, nil
	}
	var out []UserFile
	start := userFileKey(user, prefix)
	c := b.Cursor()
	for k, v := c.Seek(start); k != nil && bytes.HasPrefix(k, start); k, v = c.Next() {
		var f UserFile
		if err := json.Unmarshal(v, &f); err != nil {
			return nil, fmt.Errorf("decode %s/%q: %w", bucketUserFiles, k, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// PutUserFile stores content as the caller's file name, replacing the file
// of that name if they have one (its key stays). Refused: a bad name, a
// file over MaxUserFileSize, a user who would hold more than MaxUserFiles
// files or MaxUserFileBytes bytes.
func (s *Store) PutUserFile(ctx context.Context, actor Actor, name string, content []byte) (UserFile, error) {
	if err := CheckUserFileName(name); err != nil {
		return UserFile{}, err
	}
	if actor.Name == "" {
		return UserFile{}, errorf(CodeForbidden, "files belong to users: authenticate as one")
	}
	if len(content) > MaxUserFileSize {
		return UserFile{}, errorf(CodeInvalid, "the file is %d bytes: at most %d", len(content), MaxUserFileSize)
	}
	sum := sha256.Sum256(content)
	var f UserFile
	err := s.update(ctx, func(t *Tx) error {
		if found, err := t.userExists(actor.Name); err != nil {
			return err
		} else if !found {
			return errorf(CodeForbidden, "files belong to users, and %s is none", actor.Name)
		}
		have, err := t.userFilesOf(actor.Name, "")
		if err != nil {
			return err
		}
		total := int64(len(content))
		var old *UserFile
		for i := range have {
			if have[i].Name == name {
				old = &have[i]
				continue
			}
			total += have[i].Size
		}
		if old == nil && len(have) >= MaxUserFiles {
			return errorf(CodeConflict, "user %s already has %d files, the most one may hold: delete one first", actor.Name, len(have))
		}
		if total > MaxUserFileBytes {
			return errorf(CodeConflict, "user %s's files would hold %d bytes: at most %d", actor.Name, total, MaxUserFileBytes)
		}
		f = UserFile{Owner: actor.Name, Name: name, Key: newFileKey(), Size: int64(len(content)),
			SHA256: hex.EncodeToString(sum[:]), Created: t.now, Updated: t.now}
		if old != nil {
			f.Key, f.Created = old.Key, old.Created
		}
		for _, b := range [][]byte{bucketUserFiles, bucketUserFileData} {
			if _, err := t.tx.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("create bucket %s: %w", b, err)
			}
		}
		k := userFileKey(actor.Name, name)
		if err := t.put(bucketUserFiles, k, f); err != nil {
			return err
		}
		return t.putRaw(bucketUserFileData, k, content)
	})
	if err != nil {
		return UserFile{}, err
	}
	return f, nil
}

// UserFiles lists the caller's files whose names start with prefix, by
// name.
func (s *Store) UserFiles(actor Actor, prefix string) ([]UserFile, error) {
	var out []UserFile
	err := s.view(func(t *Tx) error {
		var err error
		out, err = t.userFilesOf(actor.Name, prefix)
		return err
	})
	return out, err
}

// ReadUserFile returns the caller's file name and its content.
func (s *Store) ReadUserFile(actor Actor, name string) (UserFile, []byte, error) {
	var f UserFile
	var content []byte
	err := s.view(func(t *Tx) error {
		var err error
		f, content, err = t.userFile(actor.Name, name)
		return err
	})
	return f, content, err
}

// ReadUserFileByKey returns the caller's file whose key is key, and its
// content.
func (s *Store) ReadUserFileByKey(actor Actor, key string) (UserFile, []byte, error) {
	var f UserFile
	var content []byte
	err := s.view(func(t *Tx) error {
		have, err := t.userFilesOf(actor.Name, "")
		if err != nil {
			return err
		}
		for _, h := range have {
			if h.Key == key {
				f, content, err = t.userFile(actor.Name, h.Name)
				return err
			}
		}
		return errorf(CodeNotFound, "you have no file with the key %q", key)
	})
	return f, content, err
}

func (t *Tx) userFile(user, name string) (UserFile, []byte, error) {
	var f UserFile
	notFound := errorf(CodeNotFound, "you have no file named %q", name)
	if t.tx.Bucket(bucketUserFiles) == nil {
		return f, nil, notFound
	}
	k := userFileKey(user, name)
	if found, err := t.get(bucketUserFiles, k, &f); err != nil {
		return f, nil, err
	} else if !found {
		return f, nil, notFound
	}
	content := t.getRaw(bucketUserFileData, k)
	if int64(len(content)) != f.Size {
		return f, nil, fmt.Errorf("file %q of %s: %d bytes of content stored, %d recorded", name, user, len(content), f.Size)
	}
	if content == nil {
		content = []byte{}
	}
	return f, content, nil
}

// DeleteUserFile removes the caller's file name and returns it as it was.
func (s *Store) DeleteUserFile(ctx context.Context, actor Actor, name string) (UserFile, error) {
	var f UserFile
	err := s.update(ctx, func(t *Tx) error {
		if t.tx.Bucket(bucketUserFiles) == nil {
			return errorf(CodeNotFound, "you have no file named %q", name)
		}
		k := userFileKey(actor.Name, name)
		if found, err := t.get(bucketUserFiles, k, &f); err != nil {
			return err
		} else if !found {
			return errorf(CodeNotFound, "you have no file named %q", name)
		}
		if err := t.del(bucketUserFiles, k); err != nil {
			return err
		}
		return t.del(bucketUserFileData, k)
	})
	return f, err
}

// checkUserFiles verifies the user files for Check: every record is stored
// under its owner and name, belongs to an existing user, has content of its
// recorded size and hash, and no content lacks its record.
func (t *Tx) checkUserFiles(bad func(string, ...any)) {
	meta, data := t.tx.Bucket(bucketUserFiles), t.tx.Bucket(bucketUserFileData)
	if meta == nil && data == nil {
		return
	}
	if meta == nil || data == nil {
		bad("user files: one of the buckets %s and %s is missing", bucketUserFiles, bucketUserFileData)
		return
	}
	meta.ForEach(func(k, v []byte) error {
		var f UserFile
		if err := json.Unmarshal(v, &f); err != nil {
			bad("user file %q: undecodable: %v", k, err)
			return nil
		}
		if string(k) != string(userFileKey(f.Owner, f.Name)) {
			bad("user file %q of %s stored under key %q", f.Name, f.Owner, k)
		}
		if found, _ := t.userExists(f.Owner); !found {
			bad("user file %q belongs to %s, who is no user", f.Name, f.Owner)
		}
		content := data.Get(k)
		sum := sha256.Sum256(content)
		if int64(len(content)) != f.Size || hex.EncodeToString(sum[:]) != f.SHA256 {
			bad("user file %q of %s: its content is not the %d bytes recorded", f.Name, f.Owner, f.Size)
		}
		return nil
	})
	data.ForEach(func(k, _ []byte) error {
		if meta.Get(k) == nil {
			bad("user file content %q has no record", k)
		}
		return nil
	})
}
