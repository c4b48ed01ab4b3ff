package images

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
)

// fakeSource is a Source that only counts its Close (the job manager never
// reads it; the work does).
type fakeSource struct {
	name   string
	closed atomic.Int32
}

func (s *fakeSource) Manifest(context.Context) ([]byte, error) { return nil, errors.New("fake") }
func (s *fakeSource) Open(context.Context, File) (io.ReadCloser, error) {
	return nil, errors.New("fake")
}
func (s *fakeSource) Close() error   { s.closed.Add(1); return nil }
func (s *fakeSource) String() string { return s.name }

// blocked is work that reports progress, then waits for release or its
// context.
func blocked(release <-chan error) func(context.Context, *Job[string], Source) (string, error) {
	return func(ctx context.Context, j *Job[string], src Source) (string, error) {
		j.Progress(Progress{Path: "vmlinuz", Done: 5, Total: 10, FilesDone: 0, Files: 2})
		select {
		case err := <-release:
			if err != nil {
				return "", err
			}
			return "image of " + src.String(), nil
		case <-ctx.Done():
			return "", errors.New("download stopped")
		}
	}
}

func TestJobOutcomes(t *testing.T) {
	cause := errors.New("cancelled by alice")
	tests := map[string]struct {
		end       func(j *Job[string], release chan<- error)
		state     JobState
		result    string
		errIs     error
		errSubstr []string
	}{
		"done": {
			end:    func(_ *Job[string], release chan<- error) { release <- nil },
			state:  JobDone,
			result: "image of dir /x",
		},
		"failed": {
			end:       func(_ *Job[string], release chan<- error) { release <- errors.New("sha256 mismatch") },
			state:     JobFailed,
			errSubstr: []string{"sha256 mismatch"},
		},
		"cancelled": {
			end:       func(j *Job[string], _ chan<- error) { j.Cancel(cause) },
			state:     JobCancelled,
			errIs:     cause,
			errSubstr: []string{"cancelled by alice", "download stopped"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			js := NewJobs[string](4, 32)
			defer js.Stop()
			src := &fakeSource{name: "dir /x"}
			release := make(chan error, 1)
			j, err := js.Start(src, "alice", blocked(release))
			if err != nil {
				t.Fatal(err)
			}
			if got := js.Get(j.ID()); got != j {
				t.Fatalf("Get(%q) = %p, want %p", j.ID(), got, j)
			}
			if st := j.Status(); st.State != JobRunning || !st.Finished.IsZero() || st.Source != "dir /x" || st.By != "alice" {
				t.Fatalf("running job: %+v", st)
			}
			tc.end(j, release)
			<-j.Done()
			st := j.Status()
			if st.State != tc.state || st.Finished.IsZero() || st.Finished.Before(st.Started) {
				t.Errorf("state %s finished %v (started %v), want %s", st.State, st.Finished, st.Started, tc.state)
			}
			if st.Progress != (Progress{Path: "vmlinuz", Done: 5, Total: 10, Files: 2}) {
				t.Errorf("progress %+v", st.Progress)
			}
			switch {
			case tc.result != "":
				if st.Result == nil || *st.Result != tc.result || st.Err != nil {
					t.Errorf("result %v, err %v", st.Result, st.Err)
				}
			default:
				if st.Result != nil || st.Err == nil {
					t.Fatalf("result %v, err %v", st.Result, st.Err)
				}
			}
			if tc.errIs != nil && !errors.Is(st.Err, tc.errIs) {
				t.Errorf("err %v does not wrap %v", st.Err, tc.errIs)
			}
			for _, s := range tc.errSubstr {
				if !strings.Contains(st.Err.Error(), s) {
					t.Errorf("err %q lacks %q", st.Err, s)
				}
			}
			if n := src.closed.Load(); n != 1 {
				t.Errorf("source closed %d times, want 1", n)
			}
			// Cancelling a finished job changes nothing.
			j.Cancel(errors.New("late"))
			if after := j.Status(); after.State != st.State || after.Err != st.Err {
				t.Errorf("after a late cancel: %+v", after)
			}
		})
	}
}

func TestJobsLimit(t *testing.T) {
	js := NewJobs[string](2, 32)
	defer js.Stop()
	var releases []chan error
	var jobs []*Job[string]
	for range 2 {
		r := make(chan error, 1)
		j, err := js.Start(&fakeSource{name: "u"}, "bob", blocked(r))
		if err != nil {
			t.Fatal(err)
		}
		releases, jobs = append(releases, r), append(jobs, j)
	}
	src := &fakeSource{name: "third"}
	if _, err := js.Start(src, "bob", blocked(nil)); err == nil || !strings.Contains(err.Error(), "2 imports are running already") {
		t.Fatalf("third start: %v", err)
	}
	if src.closed.Load() != 0 {
		t.Error("a refused start closed the source (the caller owns it then)")
	}
	releases[0] <- nil
	<-jobs[0].Done()
	j, err := js.Start(&fakeSource{name: "u"}, "bob", blocked(releases[0]))
	if err != nil {
		t.Fatalf("start after one finished: %v", err)
	}
	if ids := []string{jobs[0].ID(), jobs[1].ID(), j.ID()}; ids[0] == ids[1] || ids[1] == ids[2] || ids[0] == ids[2] {
		t.Errorf("ids repeat: %q", ids)
	}
	releases[0] <- nil
	releases[1] <- nil
}

// Only finished jobs beyond keep are forgotten, oldest first.
func TestJobsEvict(t *testing.T) {
	js := NewJobs[string](4, 2)
	defer js.Stop()
	hold := make(chan error, 1)
	running, err := js.Start(&fakeSource{name: "running"}, "c", blocked(hold))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 3 {
		r := make(chan error, 1)
		r <- nil
		j, err := js.Start(&fakeSource{name: "quick"}, "c", blocked(r))
		if err != nil {
			t.Fatal(err)
		}
		<-j.Done()
		ids = append(ids, j.ID())
	}
	var got []string
	for _, st := range js.List() {
		got = append(got, st.ID)
	}
	// Each start beyond keep forgot the oldest finished job; the running
	// one, the oldest of all, stayed.
	want := []string{running.ID(), ids[2]}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("listed %q, want %q", got, want)
	}
	if js.Get(ids[0]) != nil {
		t.Errorf("evicted job %s still found", ids[0])
	}
	hold <- nil
}

func TestJobsStop(t *testing.T) {
	js := NewJobs[string](4, 32)
	j, err := js.Start(&fakeSource{name: "u"}, "d", blocked(nil))
	if err != nil {
		t.Fatal(err)
	}
	js.Stop() // returns only once the work has returned
	select {
	case <-j.Done():
	default:
		t.Fatal("Stop returned before the job finished")
	}
	if st := j.Status(); st.State != JobCancelled || !errors.Is(st.Err, ErrShuttingDown) {
		t.Errorf("after Stop: %s %v", st.State, st.Err)
	}
	if _, err := js.Start(&fakeSource{name: "u"}, "d", blocked(nil)); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("start after Stop: %v", err)
	}
}
