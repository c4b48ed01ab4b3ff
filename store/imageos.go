package store

import (
	"strings"
)

// An image's os and series: what it says (Image.OS, Image.Series), else
// what its name says. Cloud images are named after their release
// ("jammy-server-cloudimg-amd64", "ubuntu-24.04-server-cloudimg-amd64",
// "debian-12-genericcloud-amd64"); anything else is MAAS's "custom" os
// with the image's name for series, which is how MAAS names a custom image.

// ubuntuReleases maps Ubuntu's versions to their series.
var ubuntuReleases = map[string]string{
	"14.04": "trusty", "16.04": "xenial", "18.04": "bionic", "20.04": "focal", "22.04": "jammy",
	"22.10": "kinetic", "23.04": "lunar", "23.10": "mantic", "24.04": "noble", "24.10": "oracular",
	"25.04": "plucky", "25.10": "questing",
}

// debianReleases maps Debian's versions to their series.
var debianReleases = map[string]string{
	"9": "stretch", "10": "buster", "11": "bullseye", "12": "bookworm", "13": "trixie", "14": "forky",
}

// CustomOS is MAAS's os of an image that is no known release.
const CustomOS = "custom"

// ImageOSSeries is the os and series of an image: its own when it has
// them (a series without an os is the custom os's), else the release its
// name names, else MAAS's custom os and the image's name.
func ImageOSSeries(im Image) (string, string) {
	if im.OS != "" || im.Series != "" {
		os, series := im.OS, im.Series
		if os == "" {
			os = CustomOS
		}
		if series == "" {
			series = strings.ToLower(im.Name)
		}
		return os, series
	}
	words := strings.FieldsFunc(strings.ToLower(im.Name), func(r rune) bool { return r == '-' || r == '_' })
	for i, w := range words {
		for _, s := range ubuntuReleases {
			if w == s {
				return "ubuntu", s
			}
		}
		if s, ok := ubuntuReleases[w]; ok && i > 0 && words[i-1] == "ubuntu" {
			return "ubuntu", s
		}
		if w == "debian" && i+1 < len(words) {
			if s, ok := debianReleases[words[i+1]]; ok {
				return "debian", s
			}
		}
		for _, s := range debianReleases {
			if w == s {
				return "debian", s
			}
		}
	}
	return CustomOS, strings.ToLower(im.Name)
}
