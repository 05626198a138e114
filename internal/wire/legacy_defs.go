package wire

// LegacyDefs tracks which definition records (CallframeDef, ThreadNameDef,
// SpawnLocationDef) have been written into the current legacy file. The
// legacy rule is that a file must be readable on its own, so after rotation
// every definition has to be written again before its first use in the new
// file. Call an Ensure method before each record that uses a definition; it
// writes the definition only if the current file lacks it (or holds a
// different value, e.g. a renamed thread).
//
// The current file is the LegacyWriter last passed in: passing a different
// writer starts a new file, as does NewFile. The zero value is ready to use.
// A LegacyDefs is not safe for concurrent use.
type LegacyDefs struct {
	w          *LegacyWriter
	callframes map[uint64]legacyCallframe
	threads    map[uint32]string
	spawnLocs  map[uint16]string
}

type legacyCallframe struct {
	sym, loc string
	hasLoc   bool
}

// NewFile forgets every definition emitted so far, so that each is written
// again before its next use.
func (d *LegacyDefs) NewFile() {
	d.w = nil
	clear(d.callframes)
	clear(d.threads)
	clear(d.spawnLocs)
}

func (d *LegacyDefs) use(w *LegacyWriter) {
	if d.w != w {
		d.NewFile()
		d.w = w
	}
	if d.callframes == nil {
		d.callframes = make(map[uint64]legacyCallframe)
		d.threads = make(map[uint32]string)
		d.spawnLocs = make(map[uint16]string)
	}
}

// EnsureCallframe writes CallframeDef(addr, sym, loc) unless the current file
// already has it. hasLoc false writes "no location" (length 0xFFFF).
func (d *LegacyDefs) EnsureCallframe(w *LegacyWriter, addr uint64, sym, loc string, hasLoc bool) error {
	d.use(w)
	if !hasLoc {
		loc = ""
	}
	want := legacyCallframe{sym: sym, loc: loc, hasLoc: hasLoc}
	if got, ok := d.callframes[addr]; ok && got == want {
		return nil
	}
	rec := LegacyRecord{Code: LegacyCallframeDef, Addr: addr, Symbol: sym, Location: loc, HasLocation: hasLoc}
	if err := w.Write(&rec); err != nil {
		return err
	}
	d.callframes[addr] = want
	return nil
}

// EnsureThreadName writes ThreadNameDef(tid, name) unless the current file
// already names tid so.
func (d *LegacyDefs) EnsureThreadName(w *LegacyWriter, tid uint32, name string) error {
	d.use(w)
	if got, ok := d.threads[tid]; ok && got == name {
		return nil
	}
	rec := LegacyRecord{Code: LegacyThreadNameDef, Tid: tid, Name: name}
	if err := w.Write(&rec); err != nil {
		return err
	}
	d.threads[tid] = name
	return nil
}

// EnsureSpawnLoc writes SpawnLocationDef(id, s) unless the current file
// already has it.
func (d *LegacyDefs) EnsureSpawnLoc(w *LegacyWriter, id uint16, s string) error {
	d.use(w)
	if got, ok := d.spawnLocs[id]; ok && got == s {
		return nil
	}
	rec := LegacyRecord{Code: LegacySpawnLocationDef, SpawnLocID: id, Name: s}
	if err := w.Write(&rec); err != nil {
		return err
	}
	d.spawnLocs[id] = s
	return nil
}
