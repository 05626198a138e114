package otelctx

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"github.com/perfprof/perfprof/internal/limits"
	"github.com/perfprof/perfprof/internal/targetfile"
)

// object is an ELF file mapped into a process.
type object struct {
	path string // as /proc/PID/maps names it, without " (deleted)"
	bias uint64 // load bias: runtime address = bias + ELF virtual address
	exe  bool   // the main executable
	f    *elf.File
	file *os.File     // what f reads
	syms []elf.Symbol // .dynsym, read on first use; index i is symbol i+1
	// symErr says why syms is empty although the file has a .dynsym: it
	// reached maxDynsymBytes.
	symErr error
}

// maxDynsymBytes bounds the dynamic symbol table, and its strings, read
// from an object a target maps: debug/elf reads both whole, and the
// target can map a sparse file whose .dynsym spans a TiB of zeros.
// glibc's are some 100 KiB together, a large C++ library's a few MiB.
const maxDynsymBytes = 64 << 20

// dynsymFits returns a *limits.Error if the .dynsym of f, or its strings,
// are larger than maxDynsymBytes.
func dynsymFits(f *elf.File, path string) error {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_DYNSYM {
			continue
		}
		secs := []*elf.Section{s}
		if int(s.Link) < len(f.Sections) {
			secs = append(secs, f.Sections[s.Link])
		}
		for _, t := range secs {
			if t.Size > maxDynsymBytes {
				return limits.Errorf(limits.FileTooLarge, "%s: %s of %d bytes, more than %d", path, t.Name, t.Size, maxDynsymBytes)
			}
		}
	}
	return nil
}

// symbolErrs joins the symErr of objs.
func symbolErrs(objs []*object) error {
	var errs []error
	for _, o := range objs {
		if o.symErr != nil {
			errs = append(errs, o.symErr)
		}
	}
	return errors.Join(errs...)
}

// objectsOpened counts the ELF files loadObjects opened, for tests.
var objectsOpened atomic.Int64

// loadObjects opens the ELF files mapped into process pid, the main
// executable first, then in address order. Files are read through
// /proc/PID/root so that a process in another mount namespace (a container)
// is read from its own file system, as the target's files (see package
// targetfile): the process can replace a path it mapped with a FIFO, a
// link to /dev/zero, or a link out of its root. Links inside its root are
// followed: maps shows a file's resolved path, but the process may have
// made a link of it since, to a file that is still its own.
// (/proc/PID/map_files would reach the mapped file itself, but opening it
// takes CAP_SYS_ADMIN, which perfprof does not otherwise need.) Mappings
// that are not ELF files are skipped. The caller closes the objects.
func loadObjects(pid int, maps []mapping) ([]*object, error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return nil, fmt.Errorf("read executable of pid %d: %w", pid, err)
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	seen := map[string]bool{}
	var objs []*object
	for _, m := range maps {
		path := strings.TrimSuffix(m.name, " (deleted)")
		if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "/memfd:") || seen[path] {
			continue
		}
		seen[path] = true
		file, err := targetfile.Open(fmt.Sprintf("/proc/%d/root%s", pid, path), true)
		if err != nil {
			continue // gone, or not a regular file
		}
		f, err := elf.NewFile(file)
		if err != nil {
			file.Close()
			continue // not an ELF file (locale archive, data file)
		}
		objectsOpened.Add(1)
		bias, ok := loadBias(f, path, maps)
		if !ok {
			file.Close()
			continue
		}
		o := &object{path: path, bias: bias, exe: path == exe, f: f, file: file}
		if o.exe {
			objs = append([]*object{o}, objs...)
		} else {
			objs = append(objs, o)
		}
	}
	return objs, nil
}

func closeObjects(objs []*object) {
	for _, o := range objs {
		o.file.Close()
	}
}

// loadBias computes an object's load bias from the mapping of its first
// PT_LOAD segment: the kernel and ld.so map segments at page granularity,
// so the mapping that holds the segment's first file page starts at the
// bias plus the segment's page-aligned address.
func loadBias(f *elf.File, path string, maps []mapping) (uint64, bool) {
	const page = 4096
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		for _, m := range maps {
			if strings.TrimSuffix(m.name, " (deleted)") == path && m.offset == p.Off&^(page-1) {
				return m.start - p.Vaddr&^(page-1), true
			}
		}
		return 0, false
	}
	return 0, false
}

// dynsyms returns the object's dynamic symbols.
func (o *object) dynsyms() []elf.Symbol {
	if o.syms == nil {
		if o.symErr = dynsymFits(o.f, o.path); o.symErr != nil {
			o.syms = []elf.Symbol{}
			return o.syms
		}
		o.syms, _ = o.f.DynamicSymbols()
		if o.syms == nil {
			o.syms = []elf.Symbol{}
		}
	}
	return o.syms
}

// lookup returns the defined dynamic symbol name and its .dynsym index.
func (o *object) lookup(name string) (elf.Symbol, int, bool) {
	for i, s := range o.dynsyms() {
		if s.Name == name && s.Section != elf.SHN_UNDEF {
			return s, i + 1, true
		}
	}
	return elf.Symbol{}, 0, false
}

// readFile reads n bytes of the file's image at ELF virtual address vaddr
// (not the process's memory: for constant data such as libthread_db's
// descriptors).
func (o *object) readFile(vaddr uint64, n int) ([]byte, error) {
	for _, p := range o.f.Progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr+uint64(n) <= p.Vaddr+p.Filesz {
			b := make([]byte, n)
			if _, err := p.ReadAt(b, int64(vaddr-p.Vaddr)); err != nil {
				return nil, fmt.Errorf("%s: read %d bytes at %#x: %w", o.path, n, vaddr, err)
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("%s: address %#x is not in a loaded segment of the file", o.path, vaddr)
}
