package hotspot

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// ThreadNames returns the full names of the threads of JVM pid, keyed by
// OS thread id as we see it (for a JVM in a container, not the id it sees
// itself). Linux truncates a thread's comm to 15 bytes; HotSpot's thread
// dump has the whole name, for Java threads and for the VM's own threads
// ("VM Thread", "C2 CompilerThread0", "GC Thread#0", ...). Threads that
// exit between the dump and the lookup of their ids are left out.
func ThreadNames(ctx context.Context, pid int) (map[int]string, error) {
	out, err := Exec(ctx, pid, "jcmd", "Thread.print")
	if err != nil {
		return nil, err
	}
	names := parseThreadDump(out)
	st, err := readStatus(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("thread names of jvm %d: %w", pid, err)
	}
	if !st.nested {
		return names, nil
	}
	host, err := hostTids(pid)
	if err != nil {
		return nil, fmt.Errorf("thread names of jvm %d: %w", pid, err)
	}
	m := make(map[int]string, len(names))
	for nstid, name := range names {
		if tid, ok := host[nstid]; ok {
			m[tid] = name
		}
	}
	return m, nil
}

// parseThreadDump maps the OS thread ids of a HotSpot thread dump
// (Thread.print, threaddump) to thread names. A thread's header line is
//
//	"name" #12 [4711] daemon prio=5 os_prio=0 cpu=1.23ms elapsed=4.56s tid=0x00007f... nid=4711 runnable  [0x...]
//
// or, for the VM's threads, without the "#12 ... prio=5" part; nid is hex
// ("nid=0x1267") before JDK 19. The name is printed raw: it may hold
// quotes, and a newline, which splits the header over lines. Nothing
// after the name holds `" `, so the name ends at the last `" ` of the
// header. The first header seen for an id wins.
func parseThreadDump(dump string) map[int]string {
	lines := strings.Split(dump, "\n")
	names := make(map[int]string)
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], `"`) {
			continue
		}
		// A name with newlines: try the header as continued on the next
		// few lines, up to the next line that starts like a header.
		header := lines[i]
		for j := i; j < len(lines) && j < i+8; j++ {
			if j > i {
				if strings.HasPrefix(lines[j], `"`) {
					break
				}
				header += "\n" + lines[j]
			}
			name, tid, ok := parseHeader(header)
			if !ok {
				continue
			}
			if _, dup := names[tid]; !dup {
				names[tid] = name
			}
			i = j
			break
		}
	}
	return names
}

// parseHeader parses one thread header.
func parseHeader(h string) (name string, tid int, ok bool) {
	end := strings.LastIndex(h, `" `)
	if end < 1 {
		return "", 0, false
	}
	fields := strings.Fields(h[end+2:])
	if len(fields) == 0 || strings.Contains(h[end+2:], "\n") {
		return "", 0, false
	}
	// Java threads start with "#N", the VM's with "os_prio=".
	if !strings.HasPrefix(fields[0], "#") && !strings.HasPrefix(fields[0], "os_prio=") && !strings.HasPrefix(fields[0], "prio=") {
		return "", 0, false
	}
	for _, f := range fields {
		v, found := strings.CutPrefix(f, "nid=")
		if !found {
			continue
		}
		var n uint64
		var err error
		if hex, isHex := strings.CutPrefix(v, "0x"); isHex {
			n, err = strconv.ParseUint(hex, 16, 31)
		} else {
			n, err = strconv.ParseUint(v, 10, 31)
		}
		if err != nil || n == 0 {
			return "", 0, false
		}
		return h[1:end], int(n), true
	}
	return "", 0, false
}
