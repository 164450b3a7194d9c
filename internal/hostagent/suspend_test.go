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
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestDiskSuspendProblem(t *testing.T) {
	gi := func(n int64) *resource.Quantity { return resource.NewQuantity(n<<30, resource.BinarySI) }
	minFree := resource.MustParse("60Gi")
	for name, tc := range map[string]struct {
		free *resource.Quantity
		want string
	}{
		"room for the saved memory":                  {free: gi(100)},
		"exactly the minimum left":                   {free: gi(68)},
		"the saved memory would leave too little":    {free: gi(67), want: "would leave 59.0Gi free, under --min-free-disk 60Gi"},
		"already under the minimum":                  {free: gi(4), want: "would leave 0.0Gi free"},
		"free disk not read: not judged (not macOS)": {},
	} {
		t.Run(name, func(t *testing.T) {
			got := diskSuspendProblem(tc.free, 8<<30, minFree)
			if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("diskSuspendProblem = %q; want %q", got, tc.want)
			}
		})
	}
}

func TestMacOSSuspendProblem(t *testing.T) {
	for version, refused := range map[string]bool{"13.6.1": true, "14.0": false, "15.5": false, "26.1": false, "": false} {
		if got := macOSSuspendProblem(version); (got != "") != refused {
			t.Errorf("macOS %q: %q; want refused %v", version, got, refused)
		}
	}
}
