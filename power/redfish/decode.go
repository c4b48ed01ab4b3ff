package redfish

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The parts of DMTF resources the driver reads. Everything a BMC sends is
// outside input: links must be paths on the same BMC under /redfish/, and
// strings are bounded before they reach an error's text.

type odataID struct {
	ID string `json:"@odata.id"`
}

type serviceRoot struct {
	Systems odataID
	Links   struct {
		Sessions odataID
	}
}

type collection struct {
	Members []odataID
}

type system struct {
	path       string
	ID         string `json:"@odata.id"`
	ETag       string `json:"@odata.etag"`
	PowerState string
	Boot       struct {
		BootSourceOverrideEnabled string
		BootSourceOverrideTarget  string
		BootSourceOverrideMode    string
		AllowedTargets            []string `json:"BootSourceOverrideTarget@Redfish.AllowableValues"`
	}
	Actions struct {
		Reset struct {
			Target  string   `json:"target"`
			Allowed []string `json:"ResetType@Redfish.AllowableValues"`
		} `json:"#ComputerSystem.Reset"`
	}
	Settings struct {
		SettingsObject odataID
	} `json:"@Redfish.Settings"`
}

// checkLink accepts "" or a path under /redfish/ on the same BMC.
func checkLink(what, p string) error {
	if p == "" {
		return nil
	}
	if len(p) > 512 || !strings.HasPrefix(p, "/redfish/") || strings.ContainsAny(p, "?#\\ \t\r\n") ||
		strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") || strings.Contains(p, "//") {
		return fmt.Errorf("%s %q: not a Redfish path on this BMC", what, trunc(p, 80))
	}
	return nil
}

func decodeJSON(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("malformed JSON: %v", trunc(err.Error(), 120))
	}
	return nil
}

func decodeServiceRoot(body []byte) (serviceRoot, error) {
	var r serviceRoot
	if err := decodeJSON(body, &r); err != nil {
		return r, err
	}
	if r.Systems.ID == "" {
		return r, fmt.Errorf("no Systems link")
	}
	if err := checkLink("Systems link", r.Systems.ID); err != nil {
		return r, err
	}
	if err := checkLink("Sessions link", r.Links.Sessions.ID); err != nil {
		return r, err
	}
	r.Systems.ID = strings.TrimSuffix(r.Systems.ID, "/")
	return r, nil
}

func decodeCollection(body []byte) (collection, error) {
	var c collection
	if err := decodeJSON(body, &c); err != nil {
		return c, err
	}
	for i, m := range c.Members {
		if m.ID == "" {
			return c, fmt.Errorf("member %d has no @odata.id", i)
		}
		if err := checkLink("member", m.ID); err != nil {
			return c, err
		}
		c.Members[i].ID = strings.TrimSuffix(m.ID, "/")
	}
	return c, nil
}

func decodeSystem(body []byte) (system, error) {
	var s system
	if err := decodeJSON(body, &s); err != nil {
		return s, err
	}
	for what, p := range map[string]string{"system @odata.id": s.ID, "reset target": s.Actions.Reset.Target,
		"settings object": s.Settings.SettingsObject.ID} {
		if err := checkLink(what, p); err != nil {
			return s, err
		}
	}
	s.path = strings.TrimSuffix(s.ID, "/")
	if len(s.Actions.Reset.Allowed) > 64 || len(s.Boot.AllowedTargets) > 64 {
		return s, fmt.Errorf("too many allowable values")
	}
	for _, v := range append(append([]string{}, s.Actions.Reset.Allowed...), s.Boot.AllowedTargets...) {
		if len(v) > 64 {
			return s, fmt.Errorf("allowable value %q too long", trunc(v, 40))
		}
	}
	s.ETag = trunc(s.ETag, 256)
	return s, nil
}

// redfishMessage is the message of a Redfish error answer (the extended
// info's messages when there are any), one line and bounded; "" when the
// body is no Redfish error.
func redfishMessage(body []byte) string {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Info    []struct {
				MessageID string `json:"MessageId"`
				Message   string
			} `json:"@Message.ExtendedInfo"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	var parts []string
	for _, i := range e.Error.Info {
		if i.Message != "" {
			parts = append(parts, i.Message)
		} else if i.MessageID != "" {
			parts = append(parts, i.MessageID)
		}
		if len(parts) == 3 {
			break
		}
	}
	if len(parts) == 0 && e.Error.Message != "" {
		parts = append(parts, e.Error.Message)
	}
	return trunc(strings.Join(parts, "; "), 300)
}
