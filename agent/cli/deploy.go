package cli

import (
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"strings"

	"rackd/api"
)

// deployIdentity reads the files of deploy's --user-data and --ssh-key into
// the request.
func deployIdentity(req *api.ActionRequest, userData string, keyFiles []string) error {
	if userData != "" {
		in, from := stdin, "standard input"
		if userData != "-" {
			f, err := os.Open(userData)
			if err != nil {
				return err
			}
			defer f.Close()
			in, from = f, userData
		}
		data, err := io.ReadAll(io.LimitReader(in, api.MaxUserData+1))
		if err != nil {
			return fmt.Errorf("read %s: %w", from, err)
		}
		if len(data) > api.MaxUserData {
			return fmt.Errorf("%s: user-data is larger than %d bytes", from, api.MaxUserData)
		}
		req.UserData = base64.StdEncoding.EncodeToString(data)
	}
	for _, path := range keyFiles {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		lines, err := readKeyLines(f, path)
		f.Close()
		if err != nil {
			return err
		}
		for _, l := range lines {
			req.SSHKeys = append(req.SSHKeys, l.text)
		}
	}
	return nil
}

// deploymentRows are the deployment's lines of machines show.
func deploymentRows(row func(k, v string), d api.Deployment) {
	row("Instance", cell(d.InstanceID))
	status := "started " + when(d.Started)
	switch {
	case d.OSBooted != nil:
		status = "OS booted, cloud-init finished " + when(*d.OSBooted)
	case d.ImageWritten != nil:
		status = "image written " + when(*d.ImageWritten) + ", waiting for the OS to report"
	case d.SeedServed != nil:
		status = "writing the image (seed fetched " + when(*d.SeedServed) + ")"
	}
	row("Deployment", status)
	ud := "none"
	if d.UserDataBytes > 0 {
		ud = fmt.Sprintf("%d bytes", d.UserDataBytes)
	}
	row("User-data", ud)
	row("SSH keys", count(d.SSHKeys))
	if len(d.OSErrors) == 0 {
		return
	}
	errs := make([]string, 0, len(d.OSErrors))
	for _, e := range d.OSErrors {
		s := e.Result + " " + e.Name
		if e.Description != "" {
			s += ": " + e.Description
		}
		errs = append(errs, cell(s))
	}
	if d.OSErrorsDropped > 0 {
		errs = append(errs, fmt.Sprintf("(%d more not kept)", d.OSErrorsDropped))
	}
	row("OS errors", strings.Join(errs, "\n\t"))
}
