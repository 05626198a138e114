package wire

import "math"

// readSchema registers a schema frame's type under its id in the stream.
func (r *Reader) readSchema() error {
	r.what = "schema"
	id, err := r.u16()
	if err != nil {
		return err
	}
	n, err := r.u16()
	if err != nil {
		return err
	}
	name, err := r.str(int(n))
	if err != nil {
		return err
	}
	r.name = name
	hasTS, err := r.u8()
	if err != nil {
		return err
	}
	nf, err := r.u16()
	if err != nil {
		return err
	}
	// The key identifies the definition, to share one *Schema between
	// streams and keep decoding allocation-free in steady state.
	key := append(r.key[:0], name...)
	key = append(key, 0, hasTS)
	fields := make([]Field, 0, min(int(nf), 64))
	for i := 0; i < int(nf); i++ {
		fl, err := r.u16()
		if err != nil {
			return err
		}
		fname, err := r.str(int(fl))
		if err != nil {
			return err
		}
		t, err := r.u8()
		if err != nil {
			return err
		}
		if !FieldType(t).Valid() {
			r.r--
			r.field = fname
			return r.fail(ErrUnknownFieldType, "0x%02x", t)
		}
		fields = append(fields, Field{fname, FieldType(t)})
		key = le.AppendUint16(key, fl)
		key = append(key, fname...)
		key = append(key, t)
	}
	r.key = key
	s, ok := r.schemas[string(key)]
	if !ok {
		s = &Schema{Name: name, HasTimestamp: hasTS != 0, Fields: fields}
		if len(r.schemas) < maxInterned {
			r.schemas[string(key)] = s
		}
	}
	if int(id) < len(r.types) && r.types[id] != nil {
		if !r.types[id].Equal(s) {
			return r.fail(ErrSchemaConflict, "type id %d already is %s", id, r.types[id].Name)
		}
	} else {
		for len(r.types) <= int(id) {
			r.types = append(r.types, nil)
		}
		r.types[id] = s
	}
	r.stats.Schemas++
	return nil
}

// readPool reads the framing both pools share: a u32 count of entries,
// each a u32 id and a u32 length, whose content entry reads.
func (r *Reader) readPool(what string, entry func(id, n uint32) error) error {
	r.what = what
	n, err := r.u32()
	if err != nil {
		return err
	}
	for range n {
		id, err := r.u32()
		if err != nil {
			return err
		}
		l, err := r.u32()
		if err != nil {
			return err
		}
		if err := entry(id, l); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reader) readStringPool() error {
	err := r.readPool("string pool", func(id, l uint32) error {
		s, err := r.str(int(l))
		if err != nil {
			return err
		}
		r.strs[id] = s
		return nil
	})
	if err == nil {
		r.stats.StringPoolFrames++
	}
	return err
}

func (r *Reader) readStackPool() error {
	err := r.readPool("stack pool", func(id, cnt uint32) error {
		// Check the data is there before taking arena space for it.
		if err := r.fill(int(min(uint64(cnt)*8, math.MaxInt32))); err != nil {
			return err
		}
		var f []uint64
		if int(cnt) <= arenaChunk {
			if len(r.arena) < int(cnt) {
				r.arena = make([]uint64, arenaChunk)
			}
			f = r.arena[:cnt:cnt]
			r.arena = r.arena[cnt:]
		} else {
			f = make([]uint64, cnt)
		}
		b, err := r.need(int(cnt) * 8)
		if err != nil {
			return err
		}
		for i := range f {
			f[i] = le.Uint64(b[8*i:])
		}
		r.stacks[id] = f
		return nil
	})
	if err == nil {
		r.stats.StackPoolFrames++
	}
	return err
}

func (r *Reader) readAnnotations() error {
	r.what = "annotations"
	id, err := r.uvarint()
	if err != nil {
		return err
	}
	var s *Schema
	if id < uint64(len(r.types)) {
		s = r.types[id]
	}
	n, err := r.u16()
	if err != nil {
		return err
	}
	for range n {
		fi, err := r.u16()
		if err != nil {
			return err
		}
		kl, err := r.u16()
		if err != nil {
			return err
		}
		k, err := r.str(int(kl))
		if err != nil {
			return err
		}
		vl, err := r.u32()
		if err != nil {
			return err
		}
		v, err := r.str(int(vl))
		if err != nil {
			return err
		}
		if s != nil { // annotations of unknown types are ignored
			r.annots[s] = append(r.annots[s], Annotation{Field: int(fi), Key: k, Value: v})
		}
	}
	r.stats.AnnotationFrames++
	return nil
}
