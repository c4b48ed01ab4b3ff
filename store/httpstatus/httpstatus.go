// Package httpstatus gives the HTTP status of each of the store's domain
// refusals, one table for every API that answers them (rackd's own and
// MAAS's).
package httpstatus

import (
	"net/http"

	"rackd/store"
)

var byCode = map[store.Code]int{
	store.CodeNotFound:           http.StatusNotFound,
	store.CodeConflict:           http.StatusConflict,
	store.CodeInvalidTransition:  http.StatusConflict,
	store.CodeAllocated:          http.StatusConflict,
	store.CodeNoAvailableMachine: http.StatusConflict,
	store.CodeInvalid:            http.StatusBadRequest,
	store.CodeForbidden:          http.StatusForbidden,
	store.CodeIPInUse:            http.StatusConflict,
	store.CodeNoSubnet:           http.StatusBadRequest,
	store.CodeExhausted:          http.StatusConflict,
	store.CodeNak:                http.StatusConflict,
	store.CodeUnauthorized:       http.StatusUnauthorized,
}

// Of is the HTTP status of code, or 0 when code is not a domain refusal
// (an error the caller answers as a failure of its own).
func Of(code store.Code) int { return byCode[code] }
