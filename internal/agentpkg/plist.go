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

package agentpkg

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"regexp"
)

// launchDaemon is what the package needs from the LaunchDaemon's property
// list.
type launchDaemon struct {
	// Label is launchd's name of the job; the plist is installed as
	// <Label>.plist and postinstall bootstraps it.
	Label string
	// Program is what the job runs: Program, or else ProgramArguments[0].
	Program string
}

// labelPattern keeps the label safe as a file name and in the postinstall
// script.
var labelPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// parseLaunchDaemon reads the top-level dictionary of an XML property list:
// its string values and arrays of strings, skipping the rest.
func parseLaunchDaemon(plist []byte) (launchDaemon, error) {
	d := xml.NewDecoder(bytes.NewReader(plist))
	if err := enterTopDict(d); err != nil {
		return launchDaemon{}, err
	}
	values := map[string][]string{}
	var key string
	for {
		tok, err := d.Token()
		if err != nil {
			return launchDaemon{}, fmt.Errorf("the top-level dict is not closed: %w", err)
		}
		if _, ok := tok.(xml.EndElement); ok {
			break
		}
		start, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		switch start.Name.Local {
		case "key":
			err = d.DecodeElement(&key, &start)
		case "string":
			var s string
			err = d.DecodeElement(&s, &start)
			values[key] = []string{s}
		case "array":
			var a struct {
				Strings []string `xml:"string"`
			}
			err = d.DecodeElement(&a, &start)
			values[key] = a.Strings
		default:
			err = d.Skip()
		}
		if err != nil {
			return launchDaemon{}, fmt.Errorf("reading %q: %w", key, err)
		}
	}
	var ld launchDaemon
	if v := values["Label"]; len(v) == 1 {
		ld.Label = v[0]
	}
	if !labelPattern.MatchString(ld.Label) {
		return launchDaemon{}, fmt.Errorf("its Label %q is missing or not a plain name", ld.Label)
	}
	if v := values["Program"]; len(v) == 1 {
		ld.Program = v[0]
	} else if v := values["ProgramArguments"]; len(v) > 0 {
		ld.Program = v[0]
	}
	return ld, nil
}

// enterTopDict reads d up to the start of <plist>'s <dict>.
func enterTopDict(d *xml.Decoder) error {
	inPlist := false
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return errors.New("it is not an XML property list of a dict")
		}
		if err != nil {
			return err
		}
		start, ok := tok.(xml.StartElement)
		switch {
		case !ok:
		case !inPlist && start.Name.Local == "plist":
			inPlist = true
		case inPlist && start.Name.Local == "dict":
			return nil
		default:
			return fmt.Errorf("it holds <%s> where a property list's top-level dict belongs", start.Name.Local)
		}
	}
}
