package images

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// JobState is where an import job is.
type JobState string

// The states of a job: running until its work returns, then done, failed,
// or cancelled (its context was cancelled, whatever the work returned).
const (
	JobRunning   JobState = "running"
	JobDone      JobState = "done"
	JobFailed    JobState = "failed"
	JobCancelled JobState = "cancelled"
)

// ErrShuttingDown is the cause of the jobs Stop cancels, and the error of
// a Start after Stop.
var ErrShuttingDown = errors.New("rackd is shutting down")

// Jobs runs imports in the background, each as a job with an id whose
// progress and outcome can be read while it runs and after: at most
// maxRunning at once, and the last keep finished ones stay listed. R is
// what a job's work produces (the caller's view of the imported image).
// Jobs live in memory only.
type Jobs[R any] struct {
	maxRunning, keep int

	mu     sync.Mutex
	jobs   map[string]*Job[R]
	order  []string // ids, oldest first
	next   int
	wg     sync.WaitGroup
	closed bool
}

// NewJobs returns an empty job table.
func NewJobs[R any](maxRunning, keep int) *Jobs[R] {
	return &Jobs[R]{maxRunning: maxRunning, keep: keep, jobs: map[string]*Job[R]{}}
}

// Job is one import.
type Job[R any] struct {
	id     string
	source string
	by     string
	start  time.Time
	cancel context.CancelCauseFunc
	done   chan struct{}

	mu       sync.Mutex
	p        Progress
	state    JobState
	finished time.Time
	err      error
	result   *R
}

// JobStatus is a job as it is at one moment.
type JobStatus[R any] struct {
	ID string
	// Source is the source's String(); By who started the job.
	Source, By string
	State      JobState
	// Progress is the last the work reported (Job.Progress).
	Progress Progress
	Started  time.Time
	// Finished is zero while the job runs.
	Finished time.Time
	// Err says why a failed or cancelled job stopped; for a cancelled one
	// it wraps the cancel's cause.
	Err error
	// Result is the work's result once the job is done.
	Result *R
}

// Start runs work in a new job, in its own goroutine, with a context that
// Job.Cancel and Stop cancel. The job owns src and closes it when work
// returns. It fails when maxRunning jobs run already, or after Stop.
func (js *Jobs[R]) Start(src Source, by string, work func(ctx context.Context, j *Job[R], src Source) (R, error)) (*Job[R], error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.closed {
		return nil, ErrShuttingDown
	}
	running := 0
	for _, j := range js.jobs {
		if j.Status().State == JobRunning {
			running++
		}
	}
	if running >= js.maxRunning {
		return nil, fmt.Errorf("%d imports are running already; wait for one to finish", running)
	}
	js.next++
	ctx, cancel := context.WithCancelCause(context.Background())
	j := &Job[R]{id: fmt.Sprintf("i-%d", js.next), source: src.String(), by: by, start: time.Now().UTC(),
		cancel: cancel, done: make(chan struct{}), state: JobRunning}
	js.jobs[j.id] = j
	js.order = append(js.order, j.id)
	js.evict()
	js.wg.Add(1)
	go func() {
		defer js.wg.Done()
		defer close(j.done)
		defer cancel(nil)
		defer src.Close()
		r, err := work(ctx, j, src)
		j.finish(ctx, r, err)
	}()
	return j, nil
}

// evict forgets the oldest finished jobs beyond keep; running jobs stay.
func (js *Jobs[R]) evict() {
	for len(js.order) > js.keep {
		evicted := false
		for i, id := range js.order {
			if js.jobs[id].Status().State != JobRunning {
				delete(js.jobs, id)
				js.order = append(js.order[:i], js.order[i+1:]...)
				evicted = true
				break
			}
		}
		if !evicted {
			return
		}
	}
}

// Get returns the job id, or nil.
func (js *Jobs[R]) Get(id string) *Job[R] {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.jobs[id]
}

// List returns the jobs, oldest first.
func (js *Jobs[R]) List() []JobStatus[R] {
	js.mu.Lock()
	defer js.mu.Unlock()
	out := make([]JobStatus[R], 0, len(js.order))
	for _, id := range js.order {
		out = append(out, js.jobs[id].Status())
	}
	return out
}

// Stop cancels the running jobs (cause ErrShuttingDown) and waits for them,
// so that they are done with what they write to before it closes; later
// Starts fail.
func (js *Jobs[R]) Stop() {
	js.mu.Lock()
	js.closed = true
	for _, j := range js.jobs {
		j.cancel(ErrShuttingDown)
	}
	js.mu.Unlock()
	js.wg.Wait()
}

// ID is the job's id.
func (j *Job[R]) ID() string { return j.id }

// Done is closed when the job has finished.
func (j *Job[R]) Done() <-chan struct{} { return j.done }

// Cancel cancels the job's context with cause; a finished job stays as it
// is.
func (j *Job[R]) Cancel(cause error) { j.cancel(cause) }

// Progress records the work's progress (ImportOptions.Progress).
func (j *Job[R]) Progress(p Progress) {
	j.mu.Lock()
	j.p = p
	j.mu.Unlock()
}

func (j *Job[R]) finish(ctx context.Context, r R, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.finished = time.Now().UTC()
	switch {
	case err == nil:
		j.state, j.result = JobDone, &r
	case ctx.Err() != nil:
		j.state, j.err = JobCancelled, err
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			j.err = fmt.Errorf("%w: %w", cause, err)
		}
	default:
		j.state, j.err = JobFailed, err
	}
}

// Status returns the job as it is now.
func (j *Job[R]) Status() JobStatus[R] {
	j.mu.Lock()
	defer j.mu.Unlock()
	return JobStatus[R]{ID: j.id, Source: j.source, By: j.by, State: j.state, Progress: j.p,
		Started: j.start, Finished: j.finished, Err: j.err, Result: j.result}
}
