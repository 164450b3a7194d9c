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

package fakelume

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// parseSize reads a size as lume's PATCH takes it: "8192MB", "8GB", or a
// bare number of GB.
func parseSize(s string) (uint64, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	mult := uint64(1) << 30
	switch {
	case strings.HasSuffix(u, "MB"):
		mult, u = 1<<20, strings.TrimSuffix(u, "MB")
	case strings.HasSuffix(u, "GB"):
		u = strings.TrimSuffix(u, "GB")
	}
	n, err := strconv.ParseUint(u, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size: %s", s)
	}
	return n * mult, nil
}

func urlUnescape(s string) (string, error) {
	return url.PathUnescape(s)
}
