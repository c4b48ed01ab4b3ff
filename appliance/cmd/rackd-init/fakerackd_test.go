//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// TestMain makes the test binary three programs: the tests; the init
// itself (RACKD_INIT_TEST_ROLE=init, run by the tests inside a network
// namespace); and, when the init runs it as "serve --config FILE", a
// stand-in for rackd that keeps the part of rackd's contract the init
// relies on (below).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(fakeRackd(os.Args[2:]))
	}
	if os.Getenv("RACKD_INIT_TEST_ROLE") == "init" {
		main()
		return
	}
	os.Exit(m.Run())
}

// fakeRackd is rackd as the init sees it: it reads state_dir and listen
// from its config, makes the admin token at its first start, answers
// /healthz (200, or per FAKE_RACKD=unbound 503 with rackd's reason), the
// subnets and images routes the init calls (admin token required; state
// kept in the state dir), and exits with code 100 on POST /fake/exit. With
// FAKE_RACKD=crash it prints a line and exits 5 at once.
func fakeRackd(args []string) int {
	if len(args) != 2 || args[0] != "--config" {
		fmt.Fprintln(os.Stderr, "fake rackd: want serve --config FILE, got", args)
		return 2
	}
	var cfg struct {
		Listen   string `toml:"listen"`
		StateDir string `toml:"state_dir"`
		DHCP     struct {
			Interfaces []string `toml:"interfaces"`
		} `toml:"dhcp"`
	}
	if _, err := toml.DecodeFile(args[1], &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fake rackd:", err)
		return 2
	}
	mode := os.Getenv("FAKE_RACKD")
	if mode == "crash" {
		fmt.Println("fake rackd: open store: schema 99 is newer than this build")
		return 5
	}
	tokenFile := filepath.Join(cfg.StateDir, "admin.token")
	if _, err := os.Stat(tokenFile); err != nil {
		b := make([]byte, 16)
		rand.Read(b)
		if err := os.WriteFile(tokenFile, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "fake rackd:", err)
			return 1
		}
	}
	tok, _ := os.ReadFile(tokenFile)
	token := strings.TrimSpace(string(tok))
	stateFile := filepath.Join(cfg.StateDir, "fake.json")
	var mu sync.Mutex
	var state struct {
		Subnets []map[string]any `json:"subnets"`
		Images  []map[string]any `json:"images"`
	}
	if b, err := os.ReadFile(stateFile); err == nil {
		json.Unmarshal(b, &state)
	}
	save := func() {
		b, _ := json.Marshal(state)
		os.WriteFile(stateFile, b, 0o600)
	}
	exit := make(chan int, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if mode == "unbound" {
			http.Error(w, "dhcp interface "+strings.Join(cfg.DHCP.Interfaces, ",")+" not bound", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	admin := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+token {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			h(w, r)
		}
	}
	mux.HandleFunc("GET /api/v1/subnets", admin(func(w http.ResponseWriter, r *http.Request) { json.NewEncoder(w).Encode(state.Subnets) }))
	mux.HandleFunc("POST /api/v1/subnets", admin(func(w http.ResponseWriter, r *http.Request) {
		var s map[string]any
		json.NewDecoder(r.Body).Decode(&s)
		state.Subnets = append(state.Subnets, s)
		save()
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(s)
	}))
	mux.HandleFunc("GET /api/v1/images", admin(func(w http.ResponseWriter, r *http.Request) { json.NewEncoder(w).Encode(state.Images) }))
	mux.HandleFunc("POST /api/v1/images/import", admin(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Dir string `json:"dir"`
		}
		json.NewDecoder(r.Body).Decode(&in)
		b, err := os.ReadFile(filepath.Join(in.Dir, "rackd-image.json"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		state.Images = append(state.Images, m)
		save()
		w.WriteHeader(http.StatusCreated)
		w.Write(b)
	}))
	mux.HandleFunc("POST /fake/exit", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("bye\n"))
		exit <- 100
	})
	srv := &http.Server{Addr: cfg.Listen, Handler: mux}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Println("fake rackd: serving on", cfg.Listen)
	select {
	case code := <-exit:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		return code
	case err := <-errc:
		fmt.Fprintln(os.Stderr, "fake rackd:", err)
		return 1
	}
}
