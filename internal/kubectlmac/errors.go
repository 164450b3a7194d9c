package kubectlmac

import (
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// skippedRulesNote is the API server's note, on a custom resource that
// failed its schema, that its CEL rules were not run (a cause with no
// field, printed as "<nil>: Invalid value: \"null\": ...").
const skippedRulesNote = "some validation rules were not checked"

// readable rewrites the API server's refusal of an invalid object for a
// person: the object, then one line per field and what is wrong with it,
// without the note that rules were skipped. Other errors are returned as
// they are.
func readable(err error) error {
	var se apierrors.APIStatus
	if err == nil || !errors.As(err, &se) {
		return err
	}
	st := se.Status()
	if st.Reason != metav1.StatusReasonInvalid || st.Details == nil || len(st.Details.Causes) == 0 {
		return err
	}
	var lines []string
	for _, c := range st.Details.Causes {
		if strings.Contains(c.Message, skippedRulesNote) {
			continue
		}
		if c.Field == "" || c.Field == "<nil>" {
			lines = append(lines, c.Message)
			continue
		}
		lines = append(lines, c.Field+": "+c.Message)
	}
	if len(lines) == 0 {
		return err
	}
	return fmt.Errorf("%s %q is invalid:\n  %s", strings.ToLower(st.Details.Kind), st.Details.Name, strings.Join(lines, "\n  "))
}
