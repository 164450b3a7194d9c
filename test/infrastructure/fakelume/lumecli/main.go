/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command lumecli is a fake of lume 0.5.3's command line, for the one
// command the host agent runs: "lume shutdown NAME --user U --password P",
// which logs into the running guest over SSH and runs shutdown -h now
// there with sudo. The fake asks the fake lume server (FAKELUME_URL),
// which plays the guest: it checks that the VM runs and the credentials
// are its image's, and shuts the guest down. Its words and exit codes are
// lume's (SSHError, ArgumentParser's "Error: ..." and exit 1).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 1 && args[0] == "--version" {
		fmt.Println("0.5.3")
		return 0
	}
	if len(args) < 2 || args[0] != "shutdown" {
		fmt.Fprintln(os.Stderr, "Error: the fake lume knows only 'shutdown NAME' and '--version'")
		return 64
	}
	name, user, password := args[1], "lume", "lume"
	for i := 2; i < len(args); i++ {
		flag, value, inline := strings.Cut(args[i], "=")
		if !inline && i+1 < len(args) {
			value = args[i+1]
		}
		switch flag {
		case "-u", "--user":
			user = value
		case "-p", "--password":
			password = value
		case "-t", "--timeout", "--storage":
		default:
			fmt.Fprintf(os.Stderr, "Error: Unknown option '%s'\n", flag)
			return 64
		}
		if !inline {
			i++
		}
	}
	body, _ := json.Marshal(map[string]string{"user": user, "password": password})
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Post(strings.TrimSuffix(os.Getenv("FAKELUME_URL"), "/")+"/fake/guest/"+url.PathEscape(name)+"/shutdown", //nolint:noctx,gosec // G704: the fake server the test names; a one-shot command.
		"application/json", bytes.NewReader(body))
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: SSH connection failed: %v\n", err)
		return 1
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		fmt.Fprintf(os.Stderr, "Error: %s\n", e.Message)
		return 1
	}
	fmt.Printf("Graceful shutdown requested for '%s'.\n", name)
	return 0
}
