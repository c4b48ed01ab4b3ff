package maasapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"rackd/store"
)

// Authentication. MAAS clients sign every request with OAuth 1.0's
// PLAINTEXT method (RFC 5849 section 3.4.4):
//
//	Authorization: OAuth oauth_version="1.0", oauth_signature_method="PLAINTEXT",
//	    oauth_consumer_key="<consumer>", oauth_token="<token>",
//	    oauth_signature="&<token secret>", oauth_nonce="...", oauth_timestamp="..."
//
// A MAAS API key is "consumer:token:secret". Every rackd API token is one:
// its key is "<user>:<token id>:<token secret>" (Key), so nothing new is
// stored, the secret stays hashed like every token's, and revoking or
// expiring the rackd token kills the key at once (store.Authenticate
// decides both). The key's user is the token's user, with exactly that
// user's rights.
//
// PLAINTEXT carries the secret itself: it belongs behind TLS, as a Bearer
// token does.

// maxAuthHeader bounds the Authorization header parsed: a MAAS client's is
// about 300 bytes.
const maxAuthHeader = 4096

// Key is the MAAS API key of a rackd token: consumer key (the user), token
// key (the token's id) and the token's secret, joined by colons.
func Key(user, tokenID, secret string) string {
	return user + ":" + tokenID + ":" + secret
}

// oauthParams are the OAuth parameters of an Authorization header.
type oauthParams struct {
	consumerKey, token, signature, method, version, nonce, timestamp, realm string
}

// errNoOAuth: the request carries no OAuth Authorization header at all.
var errNoOAuth = errors.New("no OAuth Authorization header")

// parseOAuth reads an Authorization header of the OAuth scheme (RFC 5849
// section 3.5.1): the scheme name (case-insensitive), then name="value"
// pairs separated by commas, in any order, each value percent-encoded
// (gomaasapi encodes a space as "+", which is read as a space). A parameter
// given twice, an unquoted value, a stray character: an error naming it.
// Parameters OAuth does not define are ignored, as RFC 5849 lets a server.
func parseOAuth(h string) (oauthParams, error) {
	var p oauthParams
	if h == "" {
		return p, errNoOAuth
	}
	if len(h) > maxAuthHeader {
		return p, fmt.Errorf("the Authorization header is longer than %d bytes", maxAuthHeader)
	}
	scheme, rest, _ := strings.Cut(strings.TrimLeft(h, " \t"), " ")
	if !strings.EqualFold(scheme, "OAuth") {
		return p, fmt.Errorf("the Authorization header's scheme is %q: MAAS's API wants OAuth (PLAINTEXT)", truncate(scheme, 32))
	}
	seen := map[string]bool{}
	for rest = strings.TrimLeft(rest, " \t"); rest != ""; {
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 {
			return p, fmt.Errorf("malformed OAuth parameter %q: want name=\"value\"", truncate(rest, 32))
		}
		name := strings.TrimRight(rest[:eq], " \t")
		if strings.ContainsAny(name, " \t,\"") {
			return p, fmt.Errorf("malformed OAuth parameter name %q", truncate(name, 32))
		}
		rest = strings.TrimLeft(rest[eq+1:], " \t")
		if !strings.HasPrefix(rest, `"`) {
			return p, fmt.Errorf("OAuth parameter %s: its value must be quoted", truncate(name, 32))
		}
		end := strings.IndexByte(rest[1:], '"')
		if end < 0 {
			return p, fmt.Errorf("OAuth parameter %s: its value's quote is not closed", truncate(name, 32))
		}
		raw := rest[1 : 1+end]
		rest = strings.TrimLeft(rest[2+end:], " \t")
		if rest != "" {
			if rest[0] != ',' {
				return p, fmt.Errorf("OAuth parameter %s: want a comma after its value, not %q", truncate(name, 32), truncate(rest, 16))
			}
			rest = strings.TrimLeft(rest[1:], " \t")
			if rest == "" {
				return p, errors.New("the OAuth header ends with a comma")
			}
		}
		value, err := url.QueryUnescape(raw)
		if err != nil {
			return p, fmt.Errorf("OAuth parameter %s: its value is not percent-encoded: %v", truncate(name, 32), err)
		}
		if seen[name] {
			return p, fmt.Errorf("OAuth parameter %s is given twice", truncate(name, 32))
		}
		seen[name] = true
		switch name {
		case "oauth_consumer_key":
			p.consumerKey = value
		case "oauth_token":
			p.token = value
		case "oauth_signature":
			p.signature = value
		case "oauth_signature_method":
			p.method = value
		case "oauth_version":
			p.version = value
		case "oauth_nonce":
			p.nonce = value
		case "oauth_timestamp":
			p.timestamp = value
		case "realm":
			p.realm = value
		}
	}
	return p, nil
}

// tokenSecret checks the parameters of a PLAINTEXT request and returns the
// token secret its signature carries.
func (p oauthParams) tokenSecret() (string, error) {
	switch {
	case p.method == "":
		return "", errors.New("oauth_signature_method is missing: want PLAINTEXT")
	case p.method != "PLAINTEXT":
		return "", fmt.Errorf("oauth_signature_method %q is not served: rackd speaks PLAINTEXT, as MAAS does", truncate(p.method, 32))
	case p.version != "" && p.version != "1.0":
		return "", fmt.Errorf("oauth_version %q: want 1.0", truncate(p.version, 16))
	case p.consumerKey == "":
		return "", errors.New("oauth_consumer_key is missing: send the first part of the API key")
	case p.token == "":
		return "", errors.New("oauth_token is missing: send the second part of the API key")
	case p.signature == "":
		return "", errors.New("oauth_signature is missing: send \"&\" and the third part of the API key")
	}
	// The signature is the consumer secret (empty for a MAAS key) and the
	// token secret, each percent-encoded, joined by "&".
	consumer, secret, ok := strings.Cut(p.signature, "&")
	if !ok || consumer != "" || secret == "" || strings.Contains(secret, "&") {
		return "", errors.New("oauth_signature is not \"&<token secret>\"")
	}
	if s, err := url.PathUnescape(secret); err == nil {
		secret = s
	}
	return secret, nil
}

// authenticate finds who signed the request: the token whose secret the
// signature carries, if that token's id and user are the key's.
func (s *Server) authenticate(header string) (store.Actor, error) {
	p, err := parseOAuth(header)
	if errors.Is(err, errNoOAuth) {
		return store.Actor{}, errorf(http.StatusUnauthorized,
			"Authorization required: sign the request with OAuth PLAINTEXT and a MAAS API key (rackd tokens create --maas makes one)")
	}
	if err != nil {
		return store.Actor{}, errorf(http.StatusUnauthorized, "malformed Authorization header: %v", err)
	}
	secret, err := p.tokenSecret()
	if err != nil {
		return store.Actor{}, errorf(http.StatusUnauthorized, "%v", err)
	}
	actor, found, err := s.store.Authenticate(secret)
	if err != nil {
		return store.Actor{}, err
	}
	// One answer for every mismatch: which part was wrong is no business
	// of someone guessing.
	if !found || actor.Token != p.token || actor.Name != p.consumerKey {
		return store.Actor{}, errorf(http.StatusUnauthorized, "%v", errBadKey)
	}
	return actor, nil
}

// errBadKey: the key is not (or no longer) a rackd token's.
var errBadKey = errors.New("invalid API key: it is not a current rackd token's (revoked, expired, or mistyped)")

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
