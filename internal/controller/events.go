package controller

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// maxNoteLength is the longest note an event carries (the API's limit is 1 KiB).
const maxNoteLength = 1024

// truncateNote cuts an event note to maxNoteLength.
func truncateNote(s string) string {
	if len(s) <= maxNoteLength {
		return s
	}
	return s[:maxNoteLength]
}

// recordEvent records an event about obj, its note cut to the API's limit.
// A nil recorder (a reconciler built by hand in a test) records nothing.
func recordEvent(rec events.EventRecorder, obj runtime.Object, eventType, reason, action, note string) {
	if rec != nil {
		rec.Eventf(obj, nil, eventType, reason, action, "%s", truncateNote(note))
	}
}
