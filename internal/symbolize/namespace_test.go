package symbolize

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/perfprof/perfprof/internal/testchild"
)

// The sidecar case: the profiled program's binary exists only in its own
// mount namespace, and the symbolizer, outside it, still resolves its
// addresses: through /proc/PID/map_files when it has CAP_SYS_ADMIN (or
// CAP_CHECKPOINT_RESTORE), else through /proc/PID/root/PATH.

const nsSource = `#include <stdio.h>
#include <unistd.h>

long ns_burn(long n)
{
	long s = 0;
	for (long i = 0; i < n; i++)
		s += i * i;
	return s;
}

int main(void)
{
	printf("pid %d\n", (int)getpid());
	printf("ns_burn %p\n", (void *)ns_burn);
	printf("ready\n");
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)
		;
	return (int)ns_burn(3);
}
`

// nsScript mounts a tmpfs on $1 in the (new, private) mount namespace it runs
// in, copies $2 there as app and runs it: the file exists in no other
// namespace.
const nsScript = `mount -t tmpfs tmpfs "$1" && cp "$2" "$1/app" && exec "$1/app"`

// buildNS builds nsSource with -g into a fresh temporary directory.
func buildNS(t *testing.T) string {
	t.Helper()
	return compileC(t, t.TempDir(), "ns.c", nsSource, "ns", "-g", "-O1", "-fno-inline", "-fno-omit-frame-pointer")
}

// startInMountNS runs bin as mnt/app in a new mount namespace where mnt (an
// empty directory here) holds a tmpfs. It skips the test when unshare or
// mount is not permitted.
func startInMountNS(t *testing.T, bin string) (ch *child, appPath string) {
	t.Helper()
	unshare := testchild.LookTool(t, "unshare")
	// Probe first, so that a refusal skips and any later failure fails.
	probe := filepath.Join(t.TempDir(), "probe")
	if err := os.Mkdir(probe, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(unshare, "--mount", "--propagation", "private",
		"sh", "-c", `mount -t tmpfs tmpfs "$1"`, "sh", probe).CombinedOutput(); err != nil {
		testchild.Unavailable(t, "cannot mount in a new mount namespace: %v: %s", err, bytes.TrimSpace(out))
	}

	mnt := filepath.Join(t.TempDir(), "X")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	appPath = filepath.Join(mnt, "app")
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", nsScript, "sh", mnt, bin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	ch = launch(t, cmd)
	if ch.waitReady(nil) {
		// unshare and sh exec, so the program has the pid we started; take
		// the one it printed all the same.
		if pid := int(ch.addr(t, "pid")); pid != ch.pid {
			t.Logf("program runs as pid %d, started %d", pid, ch.pid)
			ch.pid = pid
		}
		return ch, appPath
	}
	ch.cmd.Wait()
	t.Fatalf("%s in a new mount namespace exited before it was ready: %s", bin, stderr.Bytes())
	return nil, ""
}

// nsMapping returns the start and limit of the executable mapping of path in
// pid, and the file address of pc for addr2line: the load bias is the start
// of the mapping of file offset 0 of path minus the vaddr of the segment at
// offset 0 of bin (a copy of the file mapped).
func nsMapping(t *testing.T, pid int, path, bin string, pc uint64) (start, limit, fileAddr uint64) {
	t.Helper()
	segVaddr, fixed := firstSegment(t, bin)
	ms, data := readMaps(t, pid)
	var base uint64
	var baseOK bool
	for _, m := range ms {
		if m.path != path {
			continue
		}
		if m.offset == "00000000" {
			base, baseOK = m.start, true
		}
		if strings.Contains(m.perms, "x") && m.start <= pc && pc < m.limit {
			start, limit = m.start, m.limit
		}
	}
	if !baseOK || limit == 0 {
		t.Fatalf("no mappings of %s around %#x in pid %d:\n%s", path, pc, pid, data)
	}
	if fixed {
		return start, limit, pc
	}
	return start, limit, pc - base + segVaddr
}

// dropCaps removes caps from the effective set of the calling thread only
// (capabilities are per thread). The caller must have locked the goroutine
// to its thread and must exit without unlocking it, so that the runtime
// discards the thread.
func dropCaps(caps ...uint) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, c := range caps {
		data[c/32].Effective &^= 1 << (c % 32)
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// hasCap reports whether the calling thread has cap in its effective set.
func hasCap(c uint) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(c%32)) != 0
}

// nsResult is what one symbolization of the namespaced program found.
type nsResult struct {
	mapFilesErr error   // os.Stat of the mapping's map_files entry
	openedAs    string  // the name the binary was opened by
	mapping     Mapping // of ns_burn
	frames      [][]Frame
	err         error
}

// symbolizeNS resolves pcs in pid with a fresh Cache, reporting the name
// the mapping of mapFiles was opened by.
func symbolizeNS(pid int, mapFiles string, pcs []uint64) (r nsResult) {
	_, r.mapFilesErr = os.Stat(mapFiles)
	c := NewCache(Options{})
	defer c.Close()
	p, err := c.Process(pid)
	if err != nil {
		r.err = err
		return r
	}
	if ms := p.find(pcs[0]); ms != nil && ms.bin != nil {
		r.openedAs = ms.bin.name
	}
	for _, pc := range pcs {
		loc := p.Lookup(pc)
		if loc.Mapping != nil {
			r.mapping = *loc.Mapping
		}
		r.frames = append(r.frames, loc.Frames)
	}
	return r
}

func TestNamespaceBinary(t *testing.T) {
	for _, tc := range []struct {
		name string
		// noMapFiles drops CAP_SYS_ADMIN and CAP_CHECKPOINT_RESTORE from
		// the symbolizing thread: /proc/PID/map_files refuses it, as it
		// does a sidecar that has CAP_SYS_PTRACE only, and the binary is
		// reached through /proc/PID/root.
		noMapFiles bool
	}{
		{"map_files", false},
		{"proc_root", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := buildNS(t)
			ch, app := startInMountNS(t, bin)
			pid := ch.pid

			// Outside the namespace the path of the mapping names nothing.
			if fi, err := os.Stat(app); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("stat %s in the test's mount namespace: %v, %v; want it not to exist", app, fi, err)
			}
			// Inside it, the file is there.
			if _, err := os.Stat(fmt.Sprintf("/proc/%d/root%s", pid, app)); err != nil {
				t.Fatalf("the binary is not in the namespace of pid %d: %v", pid, err)
			}

			fn := ch.addr(t, "ns_burn")
			pcs := []uint64{fn, fn + 4, fn + 9}
			start, limit, _ := nsMapping(t, pid, app, bin, fn)
			mapFiles := fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, start, limit)

			var r nsResult
			if !tc.noMapFiles {
				r = symbolizeNS(pid, mapFiles, pcs)
			} else {
				if !hasCap(unix.CAP_SYS_PTRACE) {
					testchild.Unavailable(t, "no CAP_SYS_PTRACE: /proc/PID/root of a root process would be refused")
				}
				done := make(chan nsResult)
				go func() {
					runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
					if err := dropCaps(unix.CAP_SYS_ADMIN, unix.CAP_CHECKPOINT_RESTORE); err != nil {
						done <- nsResult{err: err}
						return
					}
					done <- symbolizeNS(pid, mapFiles, pcs)
				}()
				r = <-done
			}
			if r.err != nil {
				t.Fatal(r.err)
			}

			wantName := mapFiles
			if tc.noMapFiles {
				if !errors.Is(r.mapFilesErr, os.ErrPermission) {
					t.Fatalf("stat %s without CAP_SYS_ADMIN: %v, want a permission error", mapFiles, r.mapFilesErr)
				}
				wantName = fmt.Sprintf("/proc/%d/root%s", pid, app)
			} else if r.mapFilesErr != nil {
				t.Fatalf("stat %s: %v", mapFiles, r.mapFilesErr)
			}
			if r.openedAs != wantName {
				t.Errorf("binary opened as %q, want %q", r.openedAs, wantName)
			}
			t.Logf("pid %d maps %s, absent here; opened as %s", pid, app, r.openedAs)

			m := r.mapping
			if m.Path != app || m.Deleted || m.Start != start || m.Limit != limit {
				t.Errorf("mapping %+v, want %s %x-%x", m, app, start, limit)
			}
			checkBuildID(t, &m, bin)
			for i, pc := range pcs {
				fs := r.frames[i]
				if len(fs) != 1 {
					t.Errorf("ns_burn+%d: frames %+v, want 1", pc-fn, fs)
					continue
				}
				got := fs[0]
				_, _, addr := nsMapping(t, pid, app, bin, pc)
				want := addr2line(t, bin, addr)
				if want.Function != "ns_burn" {
					t.Fatalf("addr2line says %q at ns_burn+%d", want.Function, pc-fn)
				}
				if got.Function != "ns_burn" || got.File != want.File || got.Line != want.Line {
					t.Errorf("ns_burn+%d: got %s at %s:%d, addr2line says %s at %s:%d",
						pc-fn, got.Function, got.File, got.Line, want.Function, want.File, want.Line)
				}
				if ws := sourceLine(t, nsSource, "long ns_burn("); got.StartLine != ws {
					t.Errorf("ns_burn+%d: StartLine %d, want %d", pc-fn, got.StartLine, ws)
				}
			}
		})
	}
}
