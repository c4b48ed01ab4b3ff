// Package maasapi serves MAAS's REST API 2.0 under /MAAS/api/2.0/, so that
// the tools written for MAAS (Juju's gomaasapi, Terraform's gomaasclient,
// python-libmaas, Ansible's maas.maas collection, the maas CLI) drive rackd
// unchanged.
//
// The package translates and owns no rule: every change goes through the
// same domain operation /api/v1 calls (Ops, implemented by the agent, and
// the store behind it), and every refusal is the store's, put into MAAS's
// words. What it adds is MAAS's shapes: OAuth PLAINTEXT authentication with
// a rackd token shown as a MAAS API key (oauth.go), MAAS's form encodings
// (form.go), MAAS's error style (server.go), MAAS's resources and their
// representations (routes.go names them all; docs/MAAS-API.md documents
// them and is held to routes.go by a test).
package maasapi
