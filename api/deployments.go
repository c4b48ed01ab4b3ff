package api

import "time"

// MaxUserData bounds a deployment's user-data, decoded (413 beyond).
const MaxUserData = 1 << 20

// Deployment is a machine's current deployment, as its owner and admins
// see it (the user-data itself: GET /api/v1/machines/{id}/user-data).
type Deployment struct {
	InstanceID    string    `json:"instance_id"`
	Image         string    `json:"image"`
	UserDataBytes int       `json:"user_data_bytes"`
	SSHKeys       int       `json:"ssh_keys"`
	Started       time.Time `json:"started"`
	// SeedServed is when the deploy environment fetched the seed; the
	// deployment then waits for the OS to report.
	SeedServed   *time.Time `json:"seed_served,omitempty"`
	ImageWritten *time.Time `json:"image_written,omitempty"`
	OSBooted     *time.Time `json:"os_booted,omitempty"`
	// OSErrors are the errors and warnings cloud-init reported (the first
	// few; OSErrorsDropped counts the rest).
	OSErrors        []OSError `json:"os_errors"`
	OSErrorsDropped int       `json:"os_errors_dropped,omitempty"`
}

// OSError is one error or warning the deployed OS's cloud-init reported.
type OSError struct {
	Time        time.Time `json:"time"`
	Result      string    `json:"result"`
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
}

// UserData is the answer of GET /api/v1/machines/{id}/user-data.
type UserData struct {
	// UserData is base64-encoded, as the deploy request gave it.
	UserData string `json:"user_data"`
	Bytes    int    `json:"bytes"`
}
