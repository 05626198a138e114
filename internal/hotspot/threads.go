package hotspot

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// ThreadNames returns the full names of the threads of JVM pid, keyed by
// OS thread id as we see it (for a JVM in a container, not the id it sees
// itself). Linux truncates a thread's comm to 15 bytes; HotSpot's thread
// dump has the whole name, for Java threads and for the VM's own threads
// ("VM Thread", "C2 CompilerThread0", "GC Thread#0", ...), of which the
// first maxThreadName bytes are kept. A reply is read as it arrives and
// never held whole; one too long, too slow, or not a reply is an error
// wrapping a *limits.Error (AttachReply).
func ThreadNames(ctx context.Context, pid int) (map[int]string, error) {
	st, err := readStatus(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("thread names of jvm %d: %w", pid, err)
	}
	names := make(map[int]string)
	err = execute(ctx, pid, "jcmd", []string{"Thread.print"}, func(r io.Reader) error {
		// Names are kept for the threads alive once the dump was
		// taken (the attach listener's among them), so that what the
		// process answers cannot grow the map past the threads it has.
		tids, err := hostTids(pid, st.nested)
		if err != nil {
			return fmt.Errorf("thread ids: %w", err)
		}
		return parseThreadDump(r, func(nid int, name []byte) {
			tid, live := tids[nid]
			if _, dup := names[tid]; live && !dup {
				names[tid] = string(cutName(name))
			}
		})
	})
	if err != nil {
		return nil, err
	}
	return names, nil
}

// maxThreadName bounds the bytes of a thread's name that are kept.
const maxThreadName = 1024

// maxDumpLine bounds a line of a thread dump; a longer one is skipped.
const maxDumpLine = 64 << 10

// maxHeaderLines bounds the lines a thread header spans: a name may hold
// newlines.
const maxHeaderLines = 8

// cutName returns the first maxThreadName bytes of name, cut between
// characters.
func cutName(name []byte) []byte {
	if len(name) <= maxThreadName {
		return name
	}
	n := maxThreadName
	for n > 0 && !utf8.RuneStart(name[n]) {
		n--
	}
	return name[:n]
}

// parseThreadDump reads a HotSpot thread dump (Thread.print, threaddump)
// line by line and calls found with the OS thread id and the name of each
// thread's header, in the order of the dump; name is valid during the
// call only. A thread's header line is
//
//	"name" #12 [4711] daemon prio=5 os_prio=0 cpu=1.23ms elapsed=4.56s tid=0x00007f... nid=4711 runnable  [0x...]
//
// or, for the VM's threads, without the "#12 ... prio=5" part; nid is hex
// ("nid=0x1267") before JDK 19. The name is printed raw: it may hold
// quotes, and a newline, which splits the header over lines. Nothing
// after the name holds `" `, so the name ends at the last `" ` of the
// header. Lines longer than maxDumpLine are skipped.
func parseThreadDump(r io.Reader, found func(nid int, name []byte)) error {
	br := bufio.NewReaderSize(r, maxDumpLine)
	// header holds a header being read, over lines while the name
	// holds newlines, up to the next line that starts like a header.
	var header []byte
	lines := 0 // of header; 0: none being read
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
			lines = 0
		} else {
			line = bytes.TrimSuffix(line, []byte("\n"))
			switch {
			case bytes.HasPrefix(line, []byte(`"`)):
				header, lines = append(header[:0], line...), 1
			case lines > 0 && lines < maxHeaderLines:
				header, lines = append(append(header, '\n'), line...), lines+1
			default:
				lines = 0
			}
			if lines > 0 {
				if name, nid, ok := parseHeader(header); ok {
					found(nid, name)
					lines = 0
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// parseHeader parses one thread header.
func parseHeader(h []byte) (name []byte, tid int, ok bool) {
	end := bytes.LastIndex(h, []byte(`" `))
	if end < 1 {
		return nil, 0, false
	}
	rest := h[end+2:]
	if bytes.IndexByte(rest, '\n') >= 0 {
		return nil, 0, false
	}
	first := true
	for f := range bytes.FieldsSeq(rest) {
		// Java threads start with "#N", the VM's with "os_prio=".
		if first && !bytes.HasPrefix(f, []byte("#")) && !bytes.HasPrefix(f, []byte("os_prio=")) && !bytes.HasPrefix(f, []byte("prio=")) {
			return nil, 0, false
		}
		first = false
		v, found := bytes.CutPrefix(f, []byte("nid="))
		if !found {
			continue
		}
		base := 10
		if hex, isHex := bytes.CutPrefix(v, []byte("0x")); isHex {
			v, base = hex, 16
		}
		n, err := strconv.ParseUint(string(v), base, 31)
		if err != nil || n == 0 {
			return nil, 0, false
		}
		return h[1:end], int(n), true
	}
	return nil, 0, false
}
