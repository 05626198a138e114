package symbolize

import (
	"debug/elf"
	"slices"
	"sort"
	"strings"
)

// symbol is one function symbol: [start, end) in ELF virtual addresses.
type symbol struct {
	start, end uint64
	name       string
	parent     int32 // index of the nearest earlier symbol that encloses start, or -1
}

// symtab is the function symbols of a binary, sorted by start, one per start
// address.
type symtab struct {
	syms []symbol
}

// newSymtab keeps the defined STT_FUNC and STT_GNU_IFUNC symbols of syms. It
// returns nil if there are none. loads bounds zero-sized symbols.
func newSymtab(elfSyms []elf.Symbol, loads []elf.ProgHeader) *symtab {
	var cand []elf.Symbol
	for _, s := range elfSyms {
		t := elf.ST_TYPE(s.Info)
		if (t != elf.STT_FUNC && t != elf.STT_GNU_IFUNC) || s.Section == elf.SHN_UNDEF || s.Value == 0 || s.Name == "" {
			continue
		}
		cand = append(cand, s)
	}
	if len(cand) == 0 {
		return nil
	}
	slices.SortStableFunc(cand, func(a, b elf.Symbol) int {
		switch {
		case a.Value < b.Value:
			return -1
		case a.Value > b.Value:
			return 1
		}
		return 0
	})

	// One symbol per address: aliases (nanosleep, __nanosleep, __libc_nanosleep)
	// share an address.
	syms := make([]symbol, 0, len(cand))
	for i := 0; i < len(cand); {
		best := cand[i]
		j := i + 1
		for ; j < len(cand) && cand[j].Value == best.Value; j++ {
			if betterSymbol(cand[j], best) {
				best = cand[j]
			}
		}
		// The largest size of the aliases: some have size 0.
		size := best.Size
		for _, s := range cand[i:j] {
			size = max(size, s.Size)
		}
		syms = append(syms, symbol{start: best.Value, end: best.Value + size, name: best.Name})
		i = j
	}

	// Zero-sized symbols (assembly labels) extend to the next symbol, or to
	// the end of their segment.
	for i := range syms {
		s := &syms[i]
		if s.end != s.start {
			continue
		}
		switch {
		case i+1 < len(syms):
			s.end = syms[i+1].start
		default:
			s.end = s.start + 1
			for _, p := range loads {
				if p.Vaddr <= s.start && s.start < p.Vaddr+p.Memsz {
					s.end = p.Vaddr + p.Memsz
				}
			}
		}
	}

	// Link each symbol to the nearest enclosing earlier symbol, so that an
	// address past the end of a nested symbol finds the symbol around it.
	var stack []int32
	for i := range syms {
		for len(stack) > 0 && syms[stack[len(stack)-1]].end <= syms[i].start {
			stack = stack[:len(stack)-1]
		}
		syms[i].parent = -1
		if len(stack) > 0 {
			syms[i].parent = stack[len(stack)-1]
		}
		stack = append(stack, int32(i))
	}
	return &symtab{syms: syms}
}

// betterSymbol reports whether a is a better name than b for the same
// address. The order follows perf's choose_best_symbol (tools/perf/util/symbol.c):
// a sized symbol, then global over weak over local, then fewer leading
// underscores, then the longer name.
func betterSymbol(a, b elf.Symbol) bool {
	if (a.Size != 0) != (b.Size != 0) {
		return a.Size != 0
	}
	if ra, rb := bindRank(a), bindRank(b); ra != rb {
		return ra > rb
	}
	ua := len(a.Name) - len(strings.TrimLeft(a.Name, "_"))
	ub := len(b.Name) - len(strings.TrimLeft(b.Name, "_"))
	if ua != ub {
		return ua < ub
	}
	return len(a.Name) > len(b.Name)
}

func bindRank(s elf.Symbol) int {
	switch elf.ST_BIND(s.Info) {
	case elf.STB_GLOBAL:
		return 2
	case elf.STB_WEAK:
		return 1
	}
	return 0
}

// lookup returns the symbol that holds addr.
func (t *symtab) lookup(addr uint64) (symbol, bool) {
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].start > addr }) - 1
	for i >= 0 {
		s := &t.syms[i]
		if addr < s.end {
			return *s, true
		}
		i = int(s.parent)
	}
	return symbol{}, false
}
