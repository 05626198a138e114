package goruntime

import (
	"debug/dwarf"
	"fmt"

	"github.com/perfprof/perfprof/internal/limits"
)

// The DWARF of a target's binary is the target's to write, and
// debug/dwarf is not written for hostile input. (*dwarf.Data).Type reads a
// type graph depth first by recursion, one level for each type not read
// before, so a chain of a million nested types overflows the goroutine's
// stack, which kills the process (recover does not catch it). Once the
// graph is read it sizes each typedef without DW_AT_byte_size, and each
// array, by recursion through typedefs, qualifiers and arrays, which a
// typedef that names itself turns into endless recursion. So before
// asking debug/dwarf for a type, typeScan walks the DIEs reachable from it
// with a loop of its own, within a budget of entries, and refuses a chain
// of such types longer than maxTypeChain, which a cycle is.

// maxTypeEntries bounds the DIEs a typeScan reads, over all the types it
// checks, and so the depth of debug/dwarf's recursion, which takes 1 to
// 1.6 KB of stack a level: at most 32 MB. runtime.g, runtime.m and
// pprof's labelMap reach 260 to 300 types in Go 1.24 to 1.26 (they point
// to the scheduler's structures), about 1 000 entries with their members
// and ends of lists: the bound leaves runtimes twenty times that.
const maxTypeEntries = 20_000

// maxTypeChain bounds a chain of typedefs, qualifiers (const, volatile,
// restrict) and array types, each of which debug/dwarf sizes by the type
// it names: Go's DWARF has chains of one or two ([N]T of a named type).
const maxTypeChain = 64

// typeScan checks the types of a dwarf.Data before debug/dwarf reads
// them. It remembers what it saw, as debug/dwarf's cache of types does:
// a type it checked costs nothing to check again.
type typeScan struct {
	r       *dwarf.Reader
	entries int                           // read so far, of maxTypeEntries
	seen    map[dwarf.Offset]bool         // type DIEs checked or queued
	next    map[dwarf.Offset]dwarf.Offset // of a typedef, qualifier or array: the type it names
	chain   map[dwarf.Offset]int          // length of the chain of such types from a DIE
}

func newTypeScan(d *dwarf.Data) *typeScan {
	return &typeScan{
		r:     d.Reader(),
		seen:  make(map[dwarf.Offset]bool),
		next:  make(map[dwarf.Offset]dwarf.Offset),
		chain: make(map[dwarf.Offset]int),
	}
}

// sized reports whether debug/dwarf sizes a type of tag by the type it
// names, by recursion.
func sized(tag dwarf.Tag) bool {
	switch tag {
	case dwarf.TagTypedef, dwarf.TagConstType, dwarf.TagVolatileType, dwarf.TagRestrictType, dwarf.TagArrayType:
		return true
	}
	return false
}

// check walks the types reachable from the DIE at root, as debug/dwarf
// follows them (DW_AT_type of the DIE and of its direct children: members,
// parameters), and returns an error wrapping a *limits.Error of kind
// TypeCycle if they take more than maxTypeEntries entries to read, or
// hold a chain of typedefs, qualifiers and arrays longer than
// maxTypeChain. A DIE it cannot read is left for debug/dwarf to refuse.
func (s *typeScan) check(root dwarf.Offset) error {
	if s.seen[root] {
		return nil
	}
	s.seen[root] = true
	stack := []dwarf.Offset{root}
	var sizedNew []dwarf.Offset
	for len(stack) > 0 {
		off := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		e, err := s.read(off)
		if err != nil {
			return err
		}
		if e == nil {
			continue
		}
		var sig bool
		push := func(e *dwarf.Entry) {
			switch t := e.Val(dwarf.AttrType).(type) {
			case dwarf.Offset:
				if !s.seen[t] {
					s.seen[t] = true
					stack = append(stack, t)
				}
			case uint64:
				sig = true
			}
		}
		push(e)
		if t, ok := e.Val(dwarf.AttrType).(dwarf.Offset); ok && sized(e.Tag) {
			s.next[off] = t
			sizedNew = append(sizedNew, off)
		}
		if !e.Children {
			continue
		}
		// Direct children only, as debug/dwarf reads them; it skips
		// entries nested below them, and so does this loop.
		for depth := 1; depth > 0; {
			kid, err := s.readNext()
			if err != nil {
				return err
			}
			switch {
			case kid == nil:
				depth = 0
			case kid.Tag == 0:
				depth--
			default:
				if depth == 1 {
					push(kid)
				}
				if kid.Children {
					depth++
				}
			}
		}
		if sig {
			// debug/dwarf reads those with a cache of their own, which
			// the walk does not follow; Go's linker writes none.
			return fmt.Errorf("type at offset %#x refers to a type unit", off)
		}
	}
	for _, off := range sizedNew {
		if err := s.chainFrom(off); err != nil {
			return err
		}
	}
	return nil
}

// read returns the DIE at off, nil if there is none there.
func (s *typeScan) read(off dwarf.Offset) (*dwarf.Entry, error) {
	s.r.Seek(off)
	e, err := s.readNext()
	if err != nil || e == nil || e.Offset != off {
		return nil, err
	}
	return e, nil
}

// readNext reads the next DIE, within the budget. A DIE it cannot decode
// ends the walk of its list, as nil would: debug/dwarf refuses it later.
func (s *typeScan) readNext() (*dwarf.Entry, error) {
	if s.entries++; s.entries > maxTypeEntries {
		return nil, limits.Errorf(limits.TypeCycle, "types reach more than %d DWARF entries", maxTypeEntries)
	}
	e, err := s.r.Next()
	if err != nil {
		return nil, nil
	}
	return e, nil
}

// chainFrom measures the chain of typedefs, qualifiers and arrays from
// off, remembering the length from each DIE on it so that each is walked
// once.
func (s *typeScan) chainFrom(off dwarf.Offset) error {
	var path []dwarf.Offset
	onPath := make(map[dwarf.Offset]bool)
	n := 0 // the length from the end of path
	for cur := off; ; {
		if l, ok := s.chain[cur]; ok {
			n = l
			break
		}
		t, ok := s.next[cur]
		if !ok {
			break
		}
		if onPath[cur] {
			return limits.Errorf(limits.TypeCycle, "type at offset %#x names itself through typedefs, qualifiers or arrays", cur)
		}
		if len(path) >= maxTypeChain {
			return limits.Errorf(limits.TypeCycle, "a chain of typedefs, qualifiers or arrays from offset %#x longer than %d", off, maxTypeChain)
		}
		onPath[cur] = true
		path = append(path, cur)
		cur = t
	}
	for i := len(path) - 1; i >= 0; i-- {
		n++
		if n > maxTypeChain {
			return limits.Errorf(limits.TypeCycle, "a chain of typedefs, qualifiers or arrays from offset %#x longer than %d", off, maxTypeChain)
		}
		s.chain[path[i]] = n
	}
	return nil
}
