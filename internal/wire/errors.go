package wire

import (
	"errors"
	"fmt"
)

// Sentinel errors, wrapped by *FormatError; check them with errors.Is.
var (
	ErrBadMagic         = errors.New("bad magic, not a TRC stream")
	ErrUnknownTag       = errors.New("unknown tag")
	ErrUnknownFieldType = errors.New("unknown field type")
	ErrSchemaConflict   = errors.New("conflicting schema re-registration")
	ErrUnknownType      = errors.New("unknown type id")
	ErrUnresolvedPool   = errors.New("unresolved pool id")
	ErrInvalid          = errors.New("invalid value")
)

// FormatError reports undecodable input: Offset is the byte offset (in the
// decompressed stream) at which decoding failed, Frame and FrameOffset the
// frame being decoded, What what was being decoded in it.
type FormatError struct {
	Offset      int64
	FrameOffset int64
	Frame       byte
	What        string
	Err         error
}

func (e *FormatError) Error() string {
	s := fmt.Sprintf("wire: offset %d: ", e.Offset)
	switch {
	case e.Frame == 0x54:
		s += "header"
	case e.FrameOffset == e.Offset:
		s += fmt.Sprintf("frame 0x%02x", e.Frame)
	default:
		s += fmt.Sprintf("frame 0x%02x at %d", e.Frame, e.FrameOffset)
	}
	if e.What != "" {
		s += ": " + e.What
	}
	return s + ": " + e.Err.Error()
}

func (e *FormatError) Unwrap() error { return e.Err }
