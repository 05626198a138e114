package hotspot

import (
	"maps"
	"os"
	"strings"
	"testing"
)

// dumpNames maps the thread ids of a dump to their names, the first
// header of an id winning.
func dumpNames(dump string) map[int]string {
	names := make(map[int]string)
	parseThreadDump(strings.NewReader(dump), func(nid int, name []byte) {
		if _, dup := names[nid]; !dup {
			names[nid] = string(name)
		}
	})
	return names
}

// The dumps in testdata are jcmd Thread.print of testdata/Burn.java.
func TestParseThreadDump(t *testing.T) {
	for _, tc := range []struct {
		file string
		want map[int]string
	}{
		{"testdata/threaddump-jdk17.txt", map[int]string{
			0x568e: "main",
			0x56aa: "C2 CompilerThread0",
			0x56b2: alphaName,
			0x56b4: betaName,
			0x5754: "Attach Listener",
			0x569d: "VM Thread",
			0x5694: "GC Thread#0",
			0x5699: "G1 Refine#0",
		}},
		{"testdata/threaddump-jdk25.txt", map[int]string{
			22159: "main",
			22174: "Reference Handler",
			22195: alphaName,
			22197: betaName,
			22172: "VM Thread",
			22160: "GC Thread#0",
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			got := dumpNames(string(b))
			for tid, name := range tc.want {
				if got[tid] != name {
					t.Errorf("tid %d: %q, want %q", tid, got[tid], name)
				}
			}
			if headers := strings.Count(string(b), "\n\""); len(got) != headers {
				t.Errorf("%d threads, want %d: %v", len(got), headers, got)
			}
		})
	}
}

func TestParseThreadDumpOddNames(t *testing.T) {
	dump := strings.Join([]string{
		`"a" b" #20 [100] daemon prio=5 os_prio=0 cpu=0.10ms elapsed=1.00s tid=0x00007f0000000001 nid=100 waiting on condition  [0x0]`,
		`   java.lang.Thread.State: TIMED_WAITING (sleeping)`,
		`"" #21 prio=5 os_prio=0 cpu=0.10ms elapsed=1.00s tid=0x00007f0000000002 nid=0x65 runnable  `,
		`"ends with quote space" " #22 prio=5 os_prio=0 tid=0x3 nid=0x66 runnable`,
		`"two`,
		`lines" #23 prio=5 os_prio=0 tid=0x4 nid=0x67 runnable`,
		`"nid=0x99 fake" #24 prio=5 os_prio=0 tid=0x5 nid=0x68 runnable`,
		`"no fields"`,
		`"Thread-1":`,
		`  waiting to lock monitor 0x00007f (object 0x0000000, a java.lang.Object),`,
		`  which is held by "Thread-0"`,
		`"bad nid" #25 prio=5 os_prio=0 tid=0x6 nid=0xzz runnable`,
		`"zero nid" #26 prio=5 os_prio=0 tid=0x7 nid=0 runnable`,
		`"dup" #27 prio=5 os_prio=0 tid=0x8 nid=0x65 runnable`,
		`"VM Thread" os_prio=0 cpu=0.95ms elapsed=2.62s tid=0x00007f7ac40b0200 nid=19998 runnable  `,
	}, "\n")
	want := map[int]string{
		100:   `a" b`,
		0x65:  "",
		0x66:  `ends with quote space" `,
		0x67:  "two\nlines",
		0x68:  "nid=0x99 fake",
		19998: "VM Thread",
	}
	if got := dumpNames(dump); !maps.Equal(got, want) {
		t.Errorf("got %#v\nwant %#v", got, want)
	}
}

// FuzzParseThreadDump: the parser never panics, and any name without a
// newline comes back from a header of either format.
func FuzzParseThreadDump(f *testing.F) {
	for _, file := range []string{"testdata/threaddump-jdk17.txt", "testdata/threaddump-jdk25.txt"} {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add(`"`)
	f.Add(`"" `)
	f.Add(`"x" nid=`)
	f.Add(`"x" #1 nid=0x`)
	f.Add("\"a\n\"b\" #1 nid=1\n")
	f.Fuzz(func(t *testing.T, s string) {
		dumpNames(s)
		if strings.Contains(s, "\n") {
			return
		}
		for _, header := range []string{
			`"` + s + `" #12 daemon prio=5 os_prio=0 cpu=1.00ms elapsed=2.00s tid=0x00007f0000000000 nid=0x1a2b waiting on condition  [0x0]`,
			`"` + s + `" #12 [6699] daemon prio=5 os_prio=0 cpu=1.00ms elapsed=2.00s tid=0x00007f0000000000 nid=6699 runnable  [0x0]`,
			`"` + s + `" os_prio=0 cpu=1.00ms elapsed=2.00s tid=0x00007f0000000000 nid=6699 runnable  `,
		} {
			got := dumpNames("Full thread dump\n\n" + header + "\n   java.lang.Thread.State: RUNNABLE\n")
			if len(got) != 1 || got[6699] != s {
				t.Fatalf("header %q: got %#v", header, got)
			}
		}
	})
}
