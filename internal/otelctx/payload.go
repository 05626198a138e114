package otelctx

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the messages a payload holds. ProcessContext is
// opentelemetry.proto.processcontext.v1development.ProcessContext; the others
// are OTLP's resource.v1 and common.v1 messages.
const (
	fieldContextResource   = 1 // ProcessContext.resource: Resource
	fieldContextAttributes = 2 // ProcessContext.attributes (extra_attributes): repeated KeyValue

	fieldResourceAttributes = 1 // Resource.attributes: repeated KeyValue

	fieldKVKey   = 1 // KeyValue.key: string
	fieldKVValue = 2 // KeyValue.value: AnyValue

	fieldAnyString = 1 // AnyValue.string_value
	fieldAnyBool   = 2 // AnyValue.bool_value
	fieldAnyInt    = 3 // AnyValue.int_value
	fieldAnyDouble = 4 // AnyValue.double_value
	fieldAnyArray  = 5 // AnyValue.array_value: ArrayValue{values = 1: repeated AnyValue}
	fieldAnyKVList = 6 // AnyValue.kvlist_value: KeyValueList{values = 1: repeated KeyValue}
	fieldAnyBytes  = 7 // AnyValue.bytes_value

	fieldListValues = 1 // ArrayValue.values, KeyValueList.values
)

// maxDepth bounds the nesting of arrays and maps, so that a hostile payload
// cannot exhaust the stack.
const maxDepth = 16

// DecodePayload decodes a ProcessContext protobuf. Unknown fields are
// skipped, as protobuf's evolution rules ask; an attribute whose value is
// unset or of an unknown kind is kept with a nil value. A key repeated
// keeps its last value.
func DecodePayload(b []byte) (Resource, error) {
	r := Resource{Attributes: map[string]any{}, Extra: map[string]any{}}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == fieldContextResource && typ == protowire.BytesType:
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num == fieldResourceAttributes && typ == protowire.BytesType {
					return decodeKeyValue(v, r.Attributes, 0)
				}
				return nil
			})
		case num == fieldContextAttributes && typ == protowire.BytesType:
			return decodeKeyValue(v, r.Extra, 0)
		}
		return nil
	})
	if err != nil {
		return Resource{}, fmt.Errorf("%w: payload: %w", ErrInvalid, err)
	}
	return r, nil
}

// eachField calls fn for every field of message b: for length-delimited
// fields v is the contents, for varints and fixed fields n is the value.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for off := 0; off < len(b); {
		num, typ, tl := protowire.ConsumeTag(b[off:])
		if tl < 0 {
			return fmt.Errorf("tag at offset %d: %w", off, protowire.ParseError(tl))
		}
		off += tl
		var v []byte
		var n uint64
		var l int
		switch typ {
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b[off:])
		case protowire.Fixed64Type:
			n, l = protowire.ConsumeFixed64(b[off:])
		case protowire.Fixed32Type:
			var n32 uint32
			n32, l = protowire.ConsumeFixed32(b[off:])
			n = uint64(n32)
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(b[off:])
		default:
			l = protowire.ConsumeFieldValue(num, typ, b[off:])
		}
		if l < 0 {
			return fmt.Errorf("field %d at offset %d: %w", num, off, protowire.ParseError(l))
		}
		off += l
		if err := fn(num, typ, v, n); err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
	}
	return nil
}

// decodeKeyValue decodes a KeyValue into m.
func decodeKeyValue(b []byte, m map[string]any, depth int) error {
	var key string
	var val any
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case fieldKVKey:
			key = string(v)
		case fieldKVValue:
			var err error
			val, err = decodeAnyValue(v, depth)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	m[key] = val
	return nil
}

// decodeAnyValue decodes an AnyValue into a Go value.
func decodeAnyValue(b []byte, depth int) (any, error) {
	if depth >= maxDepth {
		return nil, fmt.Errorf("values nested deeper than %d", maxDepth)
	}
	var val any
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == fieldAnyString && typ == protowire.BytesType:
			val = string(v)
		case num == fieldAnyBool && typ == protowire.VarintType:
			val = n != 0
		case num == fieldAnyInt && typ == protowire.VarintType:
			val = int64(n)
		case num == fieldAnyDouble && typ == protowire.Fixed64Type:
			val = math.Float64frombits(n)
		case num == fieldAnyBytes && typ == protowire.BytesType:
			val = append([]byte(nil), v...)
		case num == fieldAnyArray && typ == protowire.BytesType:
			arr := []any{}
			err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != fieldListValues || typ != protowire.BytesType {
					return nil
				}
				e, err := decodeAnyValue(v, depth+1)
				arr = append(arr, e)
				return err
			})
			val = arr
			return err
		case num == fieldAnyKVList && typ == protowire.BytesType:
			kv := map[string]any{}
			err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != fieldListValues || typ != protowire.BytesType {
					return nil
				}
				return decodeKeyValue(v, kv, depth+1)
			})
			val = kv
			return err
		}
		return nil
	})
	return val, err
}
