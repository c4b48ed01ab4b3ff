package webui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"rackd/store"
)

// Hub fans live updates out to the connected browsers. Publishing never
// blocks: each client has a bounded buffer, and a client that lets it fill
// up is dropped (its browser reconnects and reloads what it shows).
//
// Every message has an id, and the hub keeps the newest ones (backlogSize):
// a page is rendered with the id it has seen up to (Mark), and its stream
// starts with what was published since, so that a change made between the
// page's render and its stream's connection (a fast power request, a state
// change) is not lost. A browser's reconnection (Last-Event-ID) resumes the
// same way.
type Hub struct {
	mu      sync.Mutex
	clients map[*client]struct{}
	buf     int
	dropped int
	closed  bool

	// id is the last message's id; backlog the newest messages, oldest
	// first, at most backlogSize.
	id      uint64
	backlog []sent
	// watched: until then a page may still connect its stream, so the
	// hub encodes and keeps messages even with no client.
	watched time.Time
	now     func() time.Time
}

type sent struct {
	id  uint64
	msg []byte
	// machine is the machine the message is about ("" for none): a
	// stream sends it only to those who may see that machine.
	machine string
}

// backlogSize is how many messages a stream can catch up on.
const backlogSize = 256

// markFor is how long after a page's render the hub keeps messages for its
// stream to catch up on, with no client connected.
const markFor = time.Minute

type client struct {
	ch   chan sent
	gone chan struct{} // closed when the hub drops the client
}

// NewHub is a hub with buf messages of room per client.
func NewHub(buf int) *Hub { return &Hub{clients: map[*client]struct{}{}, buf: buf, now: time.Now} }

// Mark is the id of the last message published, for a page being rendered
// now: its stream asks for what follows it.
func (h *Hub) Mark() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watched = h.now().Add(markFor)
	return h.id
}

// subscribe registers a client. With after set, its channel starts with
// the kept messages published after that id; stale says that some of them
// are no longer kept (the page must reload to be right).
func (h *Hub) subscribe(after uint64, resume bool) (c *client, stale bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var missed []sent
	if resume && after < h.id {
		i := len(h.backlog)
		for i > 0 && h.backlog[i-1].id > after {
			i--
		}
		missed = h.backlog[i:]
		stale = len(h.backlog) == 0 || h.backlog[0].id > after+1
	}
	c = &client{ch: make(chan sent, h.buf+len(missed)), gone: make(chan struct{})}
	if h.closed {
		close(c.gone)
		return c, false
	}
	for _, m := range missed {
		c.ch <- m
	}
	h.clients[c] = struct{}{}
	return c, stale
}

// Close ends every stream, and those opened later at once: the server is
// shutting down, and a stream would hold its shutdown up to the end of its
// grace period.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for c := range h.clients {
		delete(h.clients, c)
		close(c.gone)
	}
}

func (h *Hub) unsubscribe(c *client) {
	h.mu.Lock()
	if _, ok := h.clients[c]; ok {
		delete(h.clients, c)
		close(c.gone)
	}
	h.mu.Unlock()
}

// Clients is how many browsers are connected.
func (h *Hub) Clients() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}

// Dropped is how many clients were dropped for being too slow.
func (h *Hub) Dropped() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dropped
}

// watchedNow: a browser is connected, or a page rendered lately may still
// connect. When not, the message is numbered but not kept, and the backlog
// forgotten: a stream resuming from before it is stale.
func (h *Hub) watchedNow() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.clients) > 0 || h.now().Before(h.watched) {
		return true
	}
	h.id++
	h.backlog = h.backlog[:0]
	return false
}

// publish sends one Server-Sent Event (kind, JSON data) about a machine
// to every client.
func (h *Hub) publish(kind, machine string, v any) {
	if !h.watchedNow() {
		return // nobody watches: not even the encoding
	}
	data, err := json.Marshal(v)
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.id++
	msg := sent{h.id, fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", h.id, kind, data), machine}
	if len(h.backlog) == backlogSize {
		copy(h.backlog, h.backlog[1:])
		h.backlog = h.backlog[:backlogSize-1]
	}
	h.backlog = append(h.backlog, msg)
	for c := range h.clients {
		select {
		case c.ch <- msg:
		default:
			delete(h.clients, c)
			close(c.gone)
			h.dropped++
		}
	}
}

// LiveEvent is a machine event as the browsers receive it (event
// "machine").
type LiveEvent struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Machine string    `json:"machine"`
	Actor   string    `json:"actor"`
	Action  string    `json:"action"`
	From    string    `json:"from,omitempty"`
	To      string    `json:"to,omitempty"`
	Reason  string    `json:"reason,omitempty"`
}

// Event publishes a committed machine event. It is the store's OnEvent
// hook: it returns at once.
func (h *Hub) Event(e store.Event) {
	h.publish("machine", e.Machine, LiveEvent{Seq: e.Seq, Time: e.Time, Machine: e.Machine, Actor: e.Actor, Action: e.Action,
		From: string(e.From), To: string(e.To), Reason: e.Reason})
}

// LivePower is a power request that ended (event "power").
type LivePower struct {
	ID      string `json:"id"`
	Machine string `json:"machine"`
	Action  string `json:"action"`
	State   string `json:"state"`
	Error   string `json:"error,omitempty"`
}

// Power publishes a power request's end (the power queue's OnFinish).
func (h *Hub) Power(r store.PowerRequest) {
	h.publish("power", r.Machine, LivePower{ID: r.ID, Machine: r.Machine, Action: string(r.Action), State: string(r.State), Error: r.Error})
}

// ssePing is how often a quiet stream sends a comment, so that proxies and
// browsers keep it open.
const ssePing = 15 * time.Second

// serveEvents is GET /events: the live updates, for as long as the session
// and the right that opened it last. Its end is prompt and said: a revoked
// or expired token, a removed user (Options.Hold), a logout or the
// session's expiry end it with the event "ended", {"reason": ...}, and the
// page goes back to the login.
func (u *UI) serveEvents(w http.ResponseWriter, r *http.Request, s *reqSession) {
	held, release := u.opts.Hold(r.Context(), s.actor)
	defer release()
	rc := http.NewResponseController(w)
	// The stream outlives any write timeout of the server. (The read
	// deadline of api.read_timeout is lifted by net/http once the request
	// is read; the test holds a stream open past it.)
	rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	flush := func() { rc.Flush() }
	// Where the stream resumes: the browser's last event on a
	// reconnection, else the mark the page was rendered with.
	from := r.Header.Get("Last-Event-ID")
	if from == "" {
		from = r.URL.Query().Get("since")
	}
	after, err := strconv.ParseUint(from, 10, 64)
	c, stale := u.hub.subscribe(after, err == nil)
	defer u.hub.unsubscribe(c)
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: 3000\n: connected\n\n")
	if stale {
		// Changes were missed that the hub no longer keeps: the page
		// reloads rather than show a state that is not the rack's.
		fmt.Fprintf(w, "event: stale\ndata: {}\n\n")
	}
	flush()
	// ended tells the browser why the stream ends, and the session goes.
	ended := func(why string) {
		u.sessions.drop(s.id)
		// A browser that does not read is not waited for.
		rc.SetWriteDeadline(time.Now().Add(2 * time.Second))
		data, _ := json.Marshal(struct {
			Reason string `json:"reason"`
		}{why})
		fmt.Fprintf(w, "event: ended\ndata: %s\n\n", data)
		flush()
		u.log.Info("webui: live updates ended", "user", s.actor.Name, "why", why)
	}
	// send writes a message the session's user may see: what another
	// user's held machine does is not shown (store.MayView, as the API's
	// reads), checked when it is sent.
	send := func(m sent) error {
		if m.machine != "" && !s.actor.Admin {
			sm, err := u.opts.Data.Machine(m.machine)
			switch {
			case err == nil:
				if store.MayView(s.actor, sm, m.machine) != nil {
					return nil
				}
			case store.CodeOf(err) != store.CodeNotFound:
				return nil // unknown: not shown
			}
			// A deleted machine's events stay visible, as through
			// the API.
		}
		_, err := w.Write(m.msg)
		return err
	}
	expiry := time.NewTimer(s.expires.Sub(u.now()))
	defer expiry.Stop()
	tick := time.NewTicker(ssePing)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-held.Done():
			ended(context.Cause(held).Error())
			return
		case <-s.ended:
			ended("the session has ended (logged out)")
			return
		case <-expiry.C:
			if u.now().Before(s.expires) {
				expiry.Reset(s.expires.Sub(u.now())) // another clock
				continue
			}
			ended("the session has expired")
			return
		case <-c.gone:
			// Dropped as too slow (the browser reconnects), or rackd is
			// shutting down.
			return
		case msg := <-c.ch:
			if err := send(msg); err != nil {
				return
			}
			// Send what else is queued in the same flush.
			for n := len(c.ch); n > 0; n-- {
				if err := send(<-c.ch); err != nil {
					return
				}
			}
			flush()
		case <-tick.C:
			if _, err := fmt.Fprintf(w, ": ping\n\n"); err != nil {
				return
			}
			flush()
		}
	}
}
