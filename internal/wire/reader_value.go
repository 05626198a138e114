package wire

// readEventFrame decodes an event frame into ev, reusing the memory of its
// values: the schema decides how many values and of which types. A CPU
// sample the fast path reads goes into cs instead, if cs is not nil.
func (r *Reader) readEventFrame(ev *Event, cs *CpuSampleRead) (sample bool, err error) {
	r.what = "event"
	id, err := r.u16()
	if err != nil {
		return false, err
	}
	if int(id) >= len(r.types) || r.types[id] == nil {
		r.r -= 2
		return false, r.fail(ErrUnknownType, "type id %d", id)
	}
	s := r.types[id]
	if cs != nil {
		if l := r.layout(id, s); l.fast != nil && r.readCpuSample(s, l, cs) {
			ev.Schema, ev.Timestamp, ev.Values = s, cs.E.Timestamp, ev.Values[:0]
			return true, nil
		}
	}
	r.name = s.Name
	ev.Schema = s
	ev.Timestamp = 0
	if s.HasTimestamp {
		b, err := r.need(3)
		if err != nil {
			return false, err
		}
		r.ts += uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16
		ev.Timestamp = r.ts
	}
	n := len(s.Fields)
	if cap(ev.Values) < n {
		ev.Values = append(ev.Values[:cap(ev.Values)], make([]Value, n-cap(ev.Values))...)
	}
	ev.Values = ev.Values[:n]
	for i := range s.Fields {
		f := &s.Fields[i]
		r.field = f.Name
		if err := r.value(&ev.Values[i], f.Type, 0); err != nil {
			return false, err
		}
	}
	return false, nil
}

// value decodes one value of type t into v.
func (r *Reader) value(v *Value, t FieldType, depth int) error {
	if depth > maxDepth {
		return r.fail(ErrInvalid, "dynamic values nested deeper than %d", maxDepth)
	}
	v.Absent = false
	if t.IsOptional() {
		t = t.Base()
		v.Type = t
		p, err := r.u8()
		if err != nil {
			return err
		}
		switch p {
		case 0:
			v.Absent = true
			return nil
		case 1:
		default:
			r.r--
			return r.fail(ErrInvalid, "presence byte 0x%02x", p)
		}
	}
	v.Type = t
	switch t {
	case I64, F64:
		x, err := r.u64()
		v.U = x
		return err
	case Bool:
		x, err := r.u8()
		v.U = 0
		if x != 0 {
			v.U = 1
		}
		return err
	case U8:
		x, err := r.u8()
		v.U = uint64(x)
		return err
	case U16:
		x, err := r.u16()
		v.U = uint64(x)
		return err
	case U32:
		x, err := r.u32()
		v.U = uint64(x)
		return err
	case Varint:
		x, err := r.uvarint()
		v.U = x
		return err
	case String:
		s, err := r.str32()
		v.S = s
		return err
	case Bytes:
		n, err := r.u32()
		if err != nil {
			return err
		}
		b, err := r.need(int(n))
		if err != nil {
			return err
		}
		v.B = append(v.B[:0], b...)
		return nil
	case PooledString:
		id, err := r.u32()
		if err != nil {
			return err
		}
		s, ok := r.strs[id]
		if !ok {
			r.r -= 4
			return r.fail(ErrUnresolvedPool, "string pool id %d", id)
		}
		v.U, v.S = uint64(id), s
		return nil
	case PooledStackFrames:
		id, err := r.u32()
		if err != nil {
			return err
		}
		f, ok := r.stacks[id]
		if !ok {
			r.r -= 4
			return r.fail(ErrUnresolvedPool, "stack pool id %d", id)
		}
		v.U, v.Frames = uint64(id), f
		return nil
	case StackFrames:
		n, err := r.u32()
		if err != nil {
			return err
		}
		f := v.frames[:0]
		for range n {
			x, err := r.u64()
			if err != nil {
				return err
			}
			f = append(f, x)
		}
		v.frames, v.Frames = f, f
		return nil
	case StringMap:
		n, err := r.u32()
		if err != nil {
			return err
		}
		m := v.Map[:0]
		for range n {
			k, err := r.str32()
			if err != nil {
				return err
			}
			val, err := r.str32()
			if err != nil {
				return err
			}
			m = append(m, StringPair{k, val})
		}
		v.Map = m
		return nil
	case DynamicList:
		n, err := r.u32()
		if err != nil {
			return err
		}
		l := v.List[:0]
		for range n {
			l = grow(l)
			if err := r.dynamic(&l[len(l)-1], depth); err != nil {
				v.List = l
				return err
			}
		}
		v.List = l
		return nil
	case DynamicMap:
		n, err := r.u32()
		if err != nil {
			return err
		}
		m := v.Entries[:0]
		for range n {
			m = grow(m)
			e := &m[len(m)-1]
			if err := r.dynamic(&e.Key, depth); err != nil {
				v.Entries = m
				return err
			}
			if err := r.dynamic(&e.Value, depth); err != nil {
				v.Entries = m
				return err
			}
		}
		v.Entries = m
		return nil
	}
	return r.fail(ErrUnknownFieldType, "0x%02x", uint8(t))
}

// dynamic decodes a tagged value inside a dynamic list or map.
func (r *Reader) dynamic(v *Value, depth int) error {
	t, err := r.u8()
	if err != nil {
		return err
	}
	if !FieldType(t).Valid() {
		r.r--
		return r.fail(ErrUnknownFieldType, "dynamic value tag 0x%02x", t)
	}
	return r.value(v, FieldType(t), depth+1)
}

// grow extends s by one element, reusing the element's old memory when the
// capacity allows.
func grow[T any](s []T) []T {
	if len(s) < cap(s) {
		return s[:len(s)+1]
	}
	var zero T
	return append(s, zero)
}
