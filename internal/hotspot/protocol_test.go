package hotspot

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/perfprof/perfprof/internal/limits"
)

func TestRequest(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"jcmd", []string{"Compiler.perfmap"}, "1\x00jcmd\x00Compiler.perfmap\x00\x00\x00"},
		{"jcmd", []string{"Thread.print", "-l"}, "1\x00jcmd\x00Thread.print -l\x00\x00\x00"},
		{"threaddump", nil, "1\x00threaddump\x00\x00\x00\x00"},
		{"load", []string{"instrument", "false", "agent.jar=x"}, "1\x00load\x00instrument\x00false\x00agent.jar=x\x00"},
	} {
		got, err := request(tc.cmd, tc.args)
		if err != nil || string(got) != tc.want {
			t.Errorf("request(%q, %q) = %q, %v; want %q", tc.cmd, tc.args, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		cmd  string
		args []string
	}{
		{"", nil},
		{"averyveryverylongcommand", nil},
		{"load", []string{"a", "b", "c", "d"}},
		{"jcmd", []string{strings.Repeat("x", maxArgLen+1)}},
		{"jcmd", []string{"a\x00b"}},
	} {
		if _, err := request(tc.cmd, tc.args); err == nil {
			t.Errorf("request(%q, %q) succeeded", tc.cmd, tc.args)
		}
	}
}

func TestReadReply(t *testing.T) {
	reply := func(s string) (string, error) {
		var out []byte
		err := readReply(context.Background(), bufio.NewReader(strings.NewReader(s)), "jcmd", func(r io.Reader) error {
			var err error
			out, err = io.ReadAll(r)
			return err
		})
		return string(out), err
	}
	if out, err := reply("0\nOpenJDK 64-Bit Server VM version 17\n"); out != "OpenJDK 64-Bit Server VM version 17\n" || err != nil {
		t.Errorf("got %q %v", out, err)
	}
	if _, err := reply("-1\nOperation nosuchop not recognized!"); err == nil || !strings.Contains(err.Error(), "status -1: Operation nosuchop not recognized!") {
		t.Errorf("status -1: %v", err)
	}
	if _, err := reply("101\n"); err == nil || !strings.Contains(err.Error(), "status 101") {
		t.Errorf("status 101: %v", err)
	}
	if _, err := reply("0\njava.lang.IllegalArgumentException: Unknown diagnostic command\n"); err == nil || !strings.Contains(err.Error(), "Unknown diagnostic command") {
		t.Errorf("exception: %v", err)
	}
	if _, err := reply(""); err == nil || isAttachReply(err) {
		t.Errorf("no reply: %v, want an error that is no bound", err)
	}
	for _, bad := range []string{"garbage\n", "0x1\n", strings.Repeat("1", 100<<10)} {
		if _, err := reply(bad); !isAttachReply(err) {
			t.Errorf("reply %.20q: %v, want an attach_reply error", bad, err)
		}
	}
}

func isAttachReply(err error) bool {
	k, ok := limits.KindOf(err)
	return ok && k == limits.AttachReply
}

func TestJavaException(t *testing.T) {
	for out, want := range map[string]bool{
		"java.lang.IllegalArgumentException: Unknown diagnostic command\n": true,
		"java.lang.OutOfMemoryError\n\tat x\n":                             true,
		"jdk.internal.vm.SomeException: x":                                 true,
		"":                                                                 false,
		"OpenJDK 64-Bit Server VM version 25.0.3+9-LTS\nJDK 25.0.3\n":     false,
		"Failed: java.nio.file.NoSuchFileException: /nonexistent/x.txt\n": false,
		"flag NoSuchFlag does not exist\n":                                false,
		"2026-11-23 02:02:05\nFull thread dump OpenJDK 64-Bit Server VM":  false,
	} {
		if got := javaException(out) != ""; got != want {
			t.Errorf("javaException(%q) = %v, want %v", out, got, want)
		}
	}
}

func TestReadStatus(t *testing.T) {
	st, err := readStatus("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	if !st.nested && st.nspid != os.Getpid() {
		t.Errorf("nspid %d, pid %d", st.nspid, os.Getpid())
	}
	if st.euid != os.Geteuid() || st.egid != os.Getegid() {
		t.Errorf("euid:egid %d:%d, want %d:%d", st.euid, st.egid, os.Geteuid(), os.Getegid())
	}
	// The Go runtime catches SIGQUIT to print goroutine stacks.
	if !st.catchesQuit {
		t.Error("SIGQUIT not caught")
	}
	if jvm, err := IsJVM(os.Getpid()); jvm || err != nil {
		t.Errorf("IsJVM(self) = %v, %v", jvm, err)
	}
}

func TestStatusSigCgt(t *testing.T) {
	dir := t.TempDir()
	for mask, want := range map[string]bool{
		"0000000101005ccd": true, // a JVM
		"0000000000010000": false,
		"0000000000000004": true,
		"0000000000000003": false,
	} {
		path := dir + "/status"
		body := fmt.Sprintf("Name:\tx\nUid:\t0\t1000\t0\t0\nGid:\t0\t1001\t0\t0\nNSpid:\t42\t7\nSigCgt:\t%s\n", mask)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := readStatus(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.catchesQuit != want || st.nspid != 7 || !st.nested || st.euid != 1000 || st.egid != 1001 {
			t.Errorf("SigCgt %s: %+v", mask, st)
		}
	}
}
