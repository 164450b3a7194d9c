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

package hostagent

import (
	"context"
	"os/exec"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/api/resource"
)

// MacFacts reads a Mac's chip (sysctl machdep.cpu.brand_string), macOS
// version (sw_vers) and the free disk under dir. What cannot be read is
// left empty.
func MacFacts(dir string) func(ctx context.Context) Facts {
	return func(ctx context.Context) Facts {
		f := Facts{
			Chip:         output(ctx, "sysctl", "-n", "machdep.cpu.brand_string"),
			MacOSVersion: output(ctx, "sw_vers", "-productVersion"),
		}
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err == nil {
			f.FreeDisk = resource.NewQuantity(int64(st.Bavail)*int64(st.Bsize), resource.BinarySI) //nolint:gosec,unconvert // block counts fit.
		}
		return f
	}
}

func output(ctx context.Context, name string, args ...string) string {
	out, err := exec.CommandContext(ctx, name, args...).Output() //nolint:gosec // fixed commands of macOS (sysctl, sw_vers).
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
