package cli_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
)

// TestDeployVerb: machines deploy sends the user-data file in base64 and
// the keys of every --ssh-key file; machines show prints the deployment.
func TestDeployVerb(t *testing.T) {
	dir := t.TempDir()
	ud := filepath.Join(dir, "user-data")
	userData := "#cloud-config\nruncmd: [touch /marker]\n"
	keys1 := filepath.Join(dir, "a.pub")
	keys2 := filepath.Join(dir, "b.pub")
	empty := filepath.Join(dir, "empty.pub")
	big := filepath.Join(dir, "big")
	for path, text := range map[string]string{ud: userData, keys1: "# laptop\nssh-ed25519 AAAAC3 a@b\n\nssh-ed25519 AAAAC4 c@d\n",
		keys2: "ecdsa-sha2-nistp256 AAAAE2 robot\n", empty: "# nothing\n", big: string(make([]byte, 1<<20+1))} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	deploying := answer{200, `{"id":"m-1","hostname":"web1","state":"DEPLOYING","arch":"amd64","macs":[],"tags":[],"ips":[],
		"power":{"driver":"ipmi","desired":"on","observed":"on"},"deploy_image":"debian",
		"deployment":{"instance_id":"i-0123456789abcdef","image":"debian","user_data_bytes":38,"ssh_keys":3,
		"started":"2025-01-02T03:04:05Z","os_errors":[]}}`}
	deployed := answer{200, `{"id":"m-1","hostname":"web1","state":"DEPLOYED","arch":"amd64","macs":[],"tags":[],"ips":[],
		"power":{"driver":"ipmi","desired":"on","observed":"on"},"deploy_image":"debian",
		"deployment":{"instance_id":"i-0123456789abcdef","image":"debian","user_data_bytes":0,"ssh_keys":1,
		"started":"2025-01-02T03:04:05Z","image_written":"2025-01-02T03:06:05Z","os_booted":"2025-01-02T03:07:05Z",
		"os_errors":[{"time":"2025-01-02T03:07:00Z","result":"FAIL","name":"modules-final/config-scripts-user","description":"running\u001b[31m scripts"}],
		"os_errors_dropped":2}}`}
	runVerbCases(t, map[string]verbCase{
		"deploy with identity": {
			args:   []string{"machines", "deploy", "web1", "--image", "debian", "--user-data", ud, "--ssh-key", keys1, "--ssh-key", keys2},
			routes: map[string]answer{"POST /api/v1/machines/web1/deploy": deploying},
			want: []seen{{Method: "POST", Path: "/api/v1/machines/web1/deploy",
				Body: `{"image":"debian","user_data":"` + base64.StdEncoding.EncodeToString([]byte(userData)) +
					`","ssh_keys":["ssh-ed25519 AAAAC3 a@b","ssh-ed25519 AAAAC4 c@d","ecdsa-sha2-nistp256 AAAAE2 robot"]}`}},
			contains: []string{"DEPLOYING"},
		},
		"deploy without identity sends none": {
			args:     []string{"machines", "deploy", "web1", "--image", "debian"},
			routes:   map[string]answer{"POST /api/v1/machines/web1/deploy": deploying},
			want:     []seen{{Method: "POST", Path: "/api/v1/machines/web1/deploy", Body: `{"image":"debian"}`}},
			contains: []string{"DEPLOYING"},
		},
		"deploy with a missing file": {
			args: []string{"machines", "deploy", "web1", "--user-data", filepath.Join(dir, "nope")}, code: 1,
			errContains: []string{"no such file"},
		},
		"deploy with a key file holding no key": {
			args: []string{"machines", "deploy", "web1", "--ssh-key", empty}, code: 1,
			errContains: []string{"holds no keys"},
		},
		"deploy with too much user-data": {
			args: []string{"machines", "deploy", "web1", "--user-data", big}, code: 1,
			errContains: []string{"user-data is larger than 1048576 bytes"},
		},
		"show a deployment": {
			args: []string{"machines", "show", "web1"},
			routes: map[string]answer{"GET /api/v1/machines/web1": deployed,
				"GET /api/v1/machines/m-1/events": {200, "[]"}},
			want: []seen{{Method: "GET", Path: "/api/v1/machines/web1"}, {Method: "GET", Path: "/api/v1/machines/m-1/events"}},
			contains: []string{"Instance:      i-0123456789abcdef\n", "Deployment:    OS booted, cloud-init finished ",
				"User-data:     none\n", "SSH keys:      1\n",
				"OS errors:     FAIL modules-final/config-scripts-user: running?[31m scripts", "(2 more not kept)"},
		},
		"show a deployment waiting for its OS": {
			args: []string{"machines", "show", "web1"},
			routes: map[string]answer{"GET /api/v1/machines/web1": deploying,
				"GET /api/v1/machines/m-1/events": {200, "[]"}},
			want:     []seen{{Method: "GET", Path: "/api/v1/machines/web1"}, {Method: "GET", Path: "/api/v1/machines/m-1/events"}},
			contains: []string{"Deployment:    started ", "User-data:     38 bytes\n", "SSH keys:      3\n"},
		},
	})
}
