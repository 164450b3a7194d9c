package hostagent

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestDHCPLeaseCondition(t *testing.T) {
	for name, tc := range map[string]struct {
		lease  time.Duration
		status metav1.ConditionStatus
		says   string
	}{
		"not a Mac, or not read":  {0, metav1.ConditionUnknown, "could not be read: the plist"},
		"macOS's default, a day":  {24 * time.Hour, metav1.ConditionTrue, "DHCPLeaseTimeSecs -int 600"},
		"just over an hour":       {time.Hour + time.Second, metav1.ConditionTrue, "sudo rm /var/db/dhcpd_leases"},
		"an hour":                 {time.Hour, metav1.ConditionFalse, "1h0m0s"},
		"ten minutes, as advised": {10 * time.Minute, metav1.ConditionFalse, "10m0s"},
	} {
		t.Run(name, func(t *testing.T) {
			status, reason, msg := dhcpLeaseCondition(tc.lease, "the plist")
			if status != tc.status || !strings.Contains(msg, tc.says) {
				t.Errorf("= %s %s %q; want %s, saying %q", status, reason, msg, tc.status, tc.says)
			}
			if status == metav1.ConditionTrue && reason != macvirtv1alpha1.HostConditionDHCPLeaseTooLong {
				t.Errorf("reason %q", reason)
			}
		})
	}
}
