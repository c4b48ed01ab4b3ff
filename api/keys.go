package api

// KeyRotation is the answer of POST /api/v1/keys/rotate.
type KeyRotation struct {
	// File is the server's secrets keyring file.
	File string `json:"file"`
	// Key is the ID of the new key, which seals every secret now.
	Key string `json:"key"`
	// Retired are the IDs of the keys removed from the keyring.
	Retired []string `json:"retired"`
	// Resealed counts the secrets re-encrypted under the new key.
	Resealed int `json:"resealed"`
	// Unreadable names the machines whose secrets were sealed under a key
	// the keyring lost (a database restored without its key file): left as
	// they are, their BMC passwords need setting again.
	Unreadable []string `json:"unreadable,omitempty"`
}
