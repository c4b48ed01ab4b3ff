package maasapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"rackd/store"
)

// Deploy images as MAAS names them: osystem and distro_series. An image
// carries its os and series (store.Image.OS, .Series: set at import,
// defaulted from its name); a deploy names them as MAAS's clients do:
// distro_series "jammy", "ubuntu/jammy", osystem "ubuntu" and
// distro_series "jammy", or a custom image's name.

// imageOS is an image's os and series.
func imageOS(im store.Image) (string, string) {
	return store.ImageOSSeries(im)
}

// deployImage is the image a deploy of m with osystem and series asks for:
// without either, the machine's last image, else the one deploy image of
// its arch when there is one ("" otherwise: the store refuses, naming
// them); with them, the deploy image of m's arch with that os and series,
// or a 400 naming those rackd has.
func (s *Server) deployImage(m store.Machine, osystem, series string) (string, error) {
	if o, sr, ok := strings.Cut(series, "/"); ok {
		if osystem != "" && osystem != o {
			return "", &apiError{status: http.StatusBadRequest, fields: map[string][]string{
				"distro_series": {fmt.Sprintf("%q is not of osystem %q.", series, osystem)}}}
		}
		osystem, series = o, sr
	}
	ims, err := s.store.Images()
	if err != nil {
		return "", err
	}
	if osystem == "" && series == "" {
		if m.DeployImage != "" {
			return "", nil
		}
		var only []string
		for _, im := range ims {
			if im.Purpose == store.PurposeDeploy && im.Arch == m.Arch {
				only = append(only, im.Name)
			}
		}
		if len(only) == 1 {
			return only[0], nil
		}
		return "", nil
	}
	var have []string
	for _, im := range ims {
		if im.Purpose != store.PurposeDeploy || im.Arch != m.Arch {
			continue
		}
		o, sr := imageOS(im)
		if (series == "" || series == sr || series == im.Name) && (osystem == "" || osystem == o) {
			return im.Name, nil
		}
		have = append(have, o+"/"+sr)
	}
	slices.Sort(have)
	want := series
	if osystem != "" {
		want = osystem + "/" + series
	}
	if len(have) == 0 {
		have = []string{"none"}
	}
	return "", &apiError{status: http.StatusBadRequest, fields: map[string][]string{
		"distro_series": {fmt.Sprintf("%q is not available for %s: rackd has %s (import an image with rackd images import).",
			want, maasArch(m.Arch), strings.Join(have, ", "))}}}
}

// deployedOS is the os and series of the image m deploys.
func (v *viewCtx) deployedOS(m store.Machine) (string, string) {
	for _, im := range v.images {
		if im.Name == m.DeployImage && im.Arch == m.Arch {
			return imageOS(im)
		}
	}
	return "", m.DeployImage
}
