//go:build amd64

package bpf

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDeniedError: a refused load names the capabilities this process
// lacks, without cilium/ebpf's RLIMIT_MEMLOCK guess; with them all, the
// error keeps what the library said and points elsewhere.
func TestDeniedError(t *testing.T) {
	refused := fmt.Errorf("field SpanctxSample: map targets: map create: %w (MEMLOCK may be too low, consider rlimit.RemoveMemlock)", unix.EPERM)
	for _, c := range []struct {
		name      string
		eff       uint64
		ok        bool
		want, not []string
	}{
		{"perfmon only", 1 << capPerfmon, true, []string{"operation not permitted", "lacks CAP_BPF (", "fix:"}, []string{"MEMLOCK", "lacks CAP_BPF and"}},
		{"none", 0, true, []string{"lacks CAP_BPF and CAP_PERFMON (", "fix:"}, []string{"MEMLOCK"}},
		{"bpf only", 1 << capBPF, true, []string{"lacks CAP_PERFMON ("}, []string{"MEMLOCK", "lacks CAP_BPF"}},
		{"bpf and perfmon", 1<<capBPF | 1<<capPerfmon, true, []string{"another reason", "MEMLOCK may be too low"}, []string{"lacks"}},
		{"sys admin", 1 << capSysAdmin, true, []string{"another reason"}, []string{"lacks"}},
		{"unknown", 0, false, []string{"MEMLOCK may be too low", "it needs CAP_BPF and CAP_PERFMON", "fix:"}, []string{"lacks"}},
	} {
		err := deniedError(refused, c.eff, c.ok)
		if !errors.Is(err, ErrPermission) {
			t.Errorf("%s: %v does not wrap ErrPermission", c.name, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
		for _, w := range c.not {
			if strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q has %q", c.name, err, w)
			}
		}
	}
}
