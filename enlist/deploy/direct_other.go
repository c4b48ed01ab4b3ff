//go:build !linux

package deploy

// alignedBuf is a plain buffer where there is no O_DIRECT.
func alignedBuf(n int) []byte { return make([]byte, n) }
