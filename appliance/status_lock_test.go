package appliance

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Writers that each read, edit and save the status file lose nothing when
// they go through UpdateStatus, however they interleave.
func TestUpdateStatusSerialises(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.json")
	const writers = 20
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			if _, err := UpdateStatus(path, func(s *Status) error {
				if s.LastUpdate == nil {
					s.LastUpdate = &UpdateRecord{}
				}
				s.LastUpdate.Reason += "x"
				return nil
			}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	st, err := LoadStatus(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.LastUpdate == nil || st.LastUpdate.Reason != strings.Repeat("x", writers) {
		t.Fatalf("after %d writers the record is %+v: a change was lost", writers, st.LastUpdate)
	}

	// A change that fails leaves the file as it was.
	boom := errors.New("boom")
	if _, err := UpdateStatus(path, func(s *Status) error { s.LastUpdate.Reason = "changed"; return boom }); !errors.Is(err, boom) {
		t.Fatalf("error %v, want the change's", err)
	}
	if st, _ := LoadStatus(path); st.LastUpdate.Reason != strings.Repeat("x", writers) {
		t.Fatalf("a failed change was saved: %+v", st.LastUpdate)
	}
}
