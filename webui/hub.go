package webui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"rackd/store"
)

// Hub fans live updates out to the connected browsers. Publishing never
// blocks: each client has a bounded buffer, and a client that lets it fill
// up is dropped (its browser reconnects and reloads what it shows).
type Hub struct {
	mu      sync.Mutex
	clients map[*client]struct{}
	buf     int
	dropped int
	closed  bool
}

type client struct {
	ch   chan []byte
	gone chan struct{} // closed when the hub drops the client
}

// NewHub is a hub with buf messages of room per client.
func NewHub(buf int) *Hub { return &Hub{clients: map[*client]struct{}{}, buf: buf} }

func (h *Hub) subscribe() *client {
	c := &client{ch: make(chan []byte, h.buf), gone: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(c.gone)
		return c
	}
	h.clients[c] = struct{}{}
	return c
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

// publish sends one Server-Sent Event (kind, JSON data) to every client.
func (h *Hub) publish(kind string, v any) {
	if h.Clients() == 0 {
		return // nobody watches: not even the encoding
	}
	data, err := json.Marshal(v)
	if err != nil {
		return
	}
	msg := fmt.Appendf(nil, "event: %s\ndata: %s\n\n", kind, data)
	h.mu.Lock()
	defer h.mu.Unlock()
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
	h.publish("machine", LiveEvent{Seq: e.Seq, Time: e.Time, Machine: e.Machine, Actor: e.Actor, Action: e.Action,
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
	h.publish("power", LivePower{ID: r.ID, Machine: r.Machine, Action: string(r.Action), State: string(r.State), Error: r.Error})
}

// sseRecheck is how often a stream re-authenticates its session: a revoked
// token or a logout ends the stream within it.
const sseRecheck = 15 * time.Second

// serveEvents is GET /events: the live updates, for as long as the session
// lasts.
func (u *UI) serveEvents(w http.ResponseWriter, r *http.Request, s *reqSession) {
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
	c := u.hub.subscribe()
	defer u.hub.unsubscribe(c)
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: 3000\n: connected\n\n")
	flush()
	tick := time.NewTicker(sseRecheck)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.gone:
			// Dropped as too slow (the browser reconnects), or rackd is
			// shutting down.
			return
		case msg := <-c.ch:
			if _, err := w.Write(msg); err != nil {
				return
			}
			// Send what else is queued in the same flush.
			for n := len(c.ch); n > 0; n-- {
				if _, err := w.Write(<-c.ch); err != nil {
					return
				}
			}
			flush()
		case <-tick.C:
			if !u.sessions.alive(s.id) || !u.now().Before(s.expires) {
				return
			}
			if _, ok, err := u.opts.Authenticate(s.token); err == nil && !ok {
				u.sessions.drop(s.id)
				return
			}
			if _, err := fmt.Fprintf(w, ": ping\n\n"); err != nil {
				return
			}
			flush()
		}
	}
}
