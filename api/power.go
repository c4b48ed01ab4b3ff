package api

import "time"

// PowerAction is the body of POST /api/v1/machines/{id}/power.
type PowerAction struct {
	Action string `json:"action"` // on, off, cycle or query
	Reason string `json:"reason,omitempty"`
}

// PowerRequest is one queued power action and its fate.
type PowerRequest struct {
	ID      string `json:"id"`
	Machine string `json:"machine"`
	Action  string `json:"action"`
	// State is pending, running, done, failed or superseded.
	State        string    `json:"state"`
	SupersededBy string    `json:"superseded_by,omitempty"`
	Error        string    `json:"error,omitempty"`
	Who          string    `json:"who"`
	Reason       string    `json:"reason,omitempty"`
	NextBoot     string    `json:"next_boot,omitempty"`
	Attempts     int       `json:"attempts"`
	Created      time.Time `json:"created"`
	Started      time.Time `json:"started,omitzero"`
	Finished     time.Time `json:"finished,omitzero"`
}

// MachinePower is a machine's desired and observed power and its open
// requests (GET /api/v1/machines/{id}/power).
type MachinePower struct {
	Machine    string    `json:"machine"`
	Driver     string    `json:"driver"`
	Desired    string    `json:"desired"`
	Observed   string    `json:"observed"`
	ObservedAt time.Time `json:"observed_at,omitzero"`
	// Policy is enforce, expect or none.
	Policy  string         `json:"policy"`
	Drift   bool           `json:"drift"`
	Pending []PowerRequest `json:"pending"`
}
