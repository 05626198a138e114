package symbolize

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
)

// ErrKernelAddressesHidden is returned by LoadKernel when /proc/kallsyms
// shows every address as zero: kernel.kptr_restrict hides them from this
// process (see proc(5)). Kernel frames then stay unresolved.
var ErrKernelAddressesHidden = errors.New("symbolize: kernel addresses hidden by kptr_restrict")

// lastKernelSymbolSize bounds the last function of /proc/kallsyms, which has
// no following symbol to end it.
const lastKernelSymbolSize = 4096

// Kernel resolves kernel addresses from /proc/kallsyms. It is read-only after
// LoadKernel, so safe for concurrent use.
type Kernel struct {
	addrs []uint64 // sorted
	names []string // names[i] starts at addrs[i]
}

// LoadKernel reads the text symbols of /proc/kallsyms. If the addresses are
// hidden it returns a Kernel that resolves nothing together with
// ErrKernelAddressesHidden.
func LoadKernel() (*Kernel, error) {
	return loadKernel("/proc/kallsyms")
}

func loadKernel(path string) (*Kernel, error) {
	f, err := os.Open(path)
	if err != nil {
		return &Kernel{}, fmt.Errorf("read kernel symbols: %w", err)
	}
	defer f.Close()
	k, err := parseKallsyms(f)
	if err != nil {
		return &Kernel{}, fmt.Errorf("read kernel symbols: %w", err)
	}
	if len(k.addrs) == 0 {
		return k, ErrKernelAddressesHidden
	}
	return k, nil
}

// parseKallsyms parses lines of the form "ffffffff81000000 T _text" or
// "ffffffffc0a01000 t fn\t[module]" and keeps the text symbols (types t, T,
// w, W) with a non-zero address.
func parseKallsyms(r io.Reader) (*Kernel, error) {
	type sym struct {
		addr uint64
		name string
	}
	var syms []sym
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	intern := make(map[string]string) // module symbols repeat names (init_module)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := sc.Bytes()
		addrB, rest, ok1 := bytes.Cut(line, []byte{' '})
		typ, rest, ok2 := bytes.Cut(rest, []byte{' '})
		if !ok1 || !ok2 || len(typ) != 1 {
			return nil, fmt.Errorf("kallsyms line %d %q: want \"ADDRESS TYPE NAME\"", lineNo, line)
		}
		switch typ[0] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		addr, err := strconv.ParseUint(string(addrB), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("kallsyms line %d: bad address: %w", lineNo, err)
		}
		if addr == 0 {
			continue
		}
		nameB, _, _ := bytes.Cut(rest, []byte{'\t'}) // drop "\t[module]"
		name, ok := intern[string(nameB)]
		if !ok {
			name = string(nameB)
			intern[name] = name
		}
		syms = append(syms, sym{addr, name})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(syms, func(a, b sym) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		}
		return 0
	})
	k := &Kernel{addrs: make([]uint64, 0, len(syms)), names: make([]string, 0, len(syms))}
	for _, s := range syms {
		if n := len(k.addrs); n > 0 && k.addrs[n-1] == s.addr {
			continue // an alias: the first one listed wins
		}
		k.addrs = append(k.addrs, s.addr)
		k.names = append(k.names, s.name)
	}
	return k, nil
}

// Lookup returns the kernel function that holds pc. kallsyms has no sizes: a
// function extends to the next one.
func (k *Kernel) Lookup(pc uint64) (Frame, bool) {
	i := sort.Search(len(k.addrs), func(i int) bool { return k.addrs[i] > pc }) - 1
	if i < 0 || (i == len(k.addrs)-1 && pc-k.addrs[i] >= lastKernelSymbolSize) {
		return Frame{}, false
	}
	return Frame{Function: k.names[i], SystemName: k.names[i]}, true
}
