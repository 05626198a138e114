package otelctx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

var (
	// ErrNotPublished means the process publishes no context of the kind
	// asked for: no OTEL_CTX mapping with a valid signature and version, or
	// no otel_thread_ctx_v1 symbol in the executable or its libraries.
	ErrNotPublished = errors.New("not published")
	// ErrUpdating means the publisher was updating its process context on
	// every attempt (zero or changing timestamp); a later read may succeed.
	ErrUpdating = errors.New("process context is being updated")
	// ErrInvalid means a context was found but its bytes do not follow the
	// format (sizes, pointers, protobuf).
	ErrInvalid = errors.New("invalid context")
)

// Mapping names under which a process context appears in /proc/PID/maps,
// depending on which of memfd_create and prctl(PR_SET_VMA_ANON_NAME)
// succeeded for the publisher (OTEP 4719, "Reading Protocol"). Readers match
// the start of the name: the kernel appends " (deleted)" to a memfd whose
// descriptor was closed, which the protocol does.
var contextMappingPrefixes = []string{"[anon_shmem:OTEL_CTX]", "[anon:OTEL_CTX]", "/memfd:OTEL_CTX"}

// isContextMapping reports whether a maps name is that of a process context.
// A longer name (/memfd:OTEL_CTX_OLD) is not: only the exact name, or the
// exact name followed by the kernel's " (deleted)", matches.
func isContextMapping(name string) bool {
	for _, p := range contextMappingPrefixes {
		if rest, ok := strings.CutPrefix(name, p); ok && (rest == "" || rest == " (deleted)") {
			return true
		}
	}
	return false
}

// Header is the 32-byte header at the start of the OTEL_CTX mapping
// (OTEP 4719, "Header Structure"), native-endian, packed.
type Header struct {
	Signature   [8]byte // "OTEL_CTX", not NUL-terminated
	Version     uint32  // 2; 1 was the development version
	PayloadSize uint32  // bytes of protobuf at Payload
	// PublishedAt is CLOCK_BOOTTIME nanoseconds of the last publication; 0
	// while the publisher is updating. Each update writes a new value, so it
	// is the readers' cache key.
	PublishedAt uint64
	Payload     uint64 // address of the payload in the publisher's memory
}

// HeaderSize is the size of [Header] in memory.
const HeaderSize = 32

// Offsets of the header's fields.
const (
	offVersion     = 8
	offPayloadSize = 12
	offPublishedAt = 16
	offPayload     = 24
)

// SupportedVersion is the header version this package reads.
const SupportedVersion = 2

// MaxPayloadSize bounds the payload a reader copies: the OTEP expects a few
// KB, and a torn or hostile header must not make us read gigabytes.
const MaxPayloadSize = 1 << 20

// ParseHeader decodes a header from its 32 bytes. It checks the signature
// and the version, not the timestamp, which the reading protocol checks on
// its own.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderSize {
		return h, fmt.Errorf("%w: header of %d bytes, want %d", ErrInvalid, len(b), HeaderSize)
	}
	copy(h.Signature[:], b)
	h.Version = binary.LittleEndian.Uint32(b[offVersion:])
	h.PayloadSize = binary.LittleEndian.Uint32(b[offPayloadSize:])
	h.PublishedAt = binary.LittleEndian.Uint64(b[offPublishedAt:])
	h.Payload = binary.LittleEndian.Uint64(b[offPayload:])
	if !bytes.Equal(h.Signature[:], []byte("OTEL_CTX")) {
		return h, fmt.Errorf("%w: signature %q, want \"OTEL_CTX\"", ErrInvalid, h.Signature[:])
	}
	if h.Version != SupportedVersion {
		return h, fmt.Errorf("%w: header version %d, want %d", ErrInvalid, h.Version, SupportedVersion)
	}
	return h, nil
}

// Resource is what a process publishes about itself (OTEP 4719).
type Resource struct {
	// Attributes are the SDK resource's attributes (service.name, ...).
	// Values are string, bool, int64, float64, []byte, []any or
	// map[string]any, as the protobuf AnyValue holds them.
	Attributes map[string]any
	// Extra are ProcessContext.attributes: data for readers that is not part
	// of the resource, such as OTEP 4947's threadlocal.* keys.
	Extra map[string]any
	// PublishedAt is the header's timestamp (CLOCK_BOOTTIME ns): unchanged
	// means the payload is unchanged.
	PublishedAt uint64
	// Mapping is the name of the mapping it was read from and Addr its start.
	Mapping string
	Addr    uint64
}

// ServiceName returns the service.name attribute, or "".
func (r Resource) ServiceName() string {
	s, _ := r.Attributes["service.name"].(string)
	return s
}

// Keys of OTEP 4947's thread-local reference data in Resource.Extra.
const (
	KeySchemaVersion   = "threadlocal.schema_version"
	KeyAttributeKeyMap = "threadlocal.attribute_key_map"
)

// SchemaVersion returns threadlocal.schema_version ("tls_v1", or
// "tlsdesc_v1_dev" from writers older than the merged OTEP), or "".
func (r Resource) SchemaVersion() string {
	s, _ := r.Extra[KeySchemaVersion].(string)
	return s
}

// KeyMap returns threadlocal.attribute_key_map: the attribute name of each
// key index used in thread context records. Entries that are not strings
// are kept as "" so that indexes stay aligned.
func (r Resource) KeyMap() []string {
	arr, _ := r.Extra[KeyAttributeKeyMap].([]any)
	out := make([]string, len(arr))
	for i, v := range arr {
		out[i], _ = v.(string)
	}
	return out
}

// readAttempts bounds the retries of the reading protocol while the
// publisher updates; updates are rare, so a few tries with a short pause
// are enough, and a reader must not spin on a process that is stuck with a
// zero timestamp.
const readAttempts = 8

// ProcessContext finds and reads the process context that process pid
// publishes. It returns an error wrapping ErrNotPublished when there is none,
// ErrUpdating when every attempt met an update, and ErrInvalid when the
// mapping or its payload is malformed.
func ProcessContext(pid int) (Resource, error) {
	maps, err := readMaps(pid)
	if err != nil {
		return Resource{}, err
	}
	mem, err := openMemory(pid)
	if err != nil {
		return Resource{}, err
	}
	defer mem.Close()
	return processContext(maps, mem)
}

func processContext(maps []mapping, mem io.ReaderAt) (Resource, error) {
	var skipped []error
	for _, m := range maps {
		if !isContextMapping(m.name) {
			continue
		}
		var b [HeaderSize]byte
		if _, err := mem.ReadAt(b[:], int64(m.start)); err != nil {
			skipped = append(skipped, fmt.Errorf("mapping %s at %#x: %w", m.name, m.start, err))
			continue
		}
		if _, err := ParseHeader(b[:]); err != nil {
			// The protocol says to skip a mapping whose signature or version
			// does not match: it is someone else's, or a version we do not
			// know.
			skipped = append(skipped, fmt.Errorf("mapping %s at %#x: %w", m.name, m.start, err))
			continue
		}
		r, err := ReadProcessContext(mem, m.start)
		if err != nil {
			return Resource{}, fmt.Errorf("process context at %#x: %w", m.start, err)
		}
		r.Mapping = m.name
		return r, nil
	}
	if len(skipped) > 0 {
		return Resource{}, fmt.Errorf("%w: no usable OTEL_CTX mapping: %w", ErrNotPublished, errors.Join(skipped...))
	}
	return Resource{}, fmt.Errorf("%w: no OTEL_CTX mapping", ErrNotPublished)
}

// ReadProcessContext reads the process context whose header is at addr in
// mem, following OTEP 4719's reading protocol: read the timestamp (zero
// means an update is under way), then the header and the payload, then the
// timestamp again; a change means the copy may be torn, so start over.
// Reads through /proc/PID/mem are system calls, which order them as the
// protocol's barriers ask.
func ReadProcessContext(mem io.ReaderAt, addr uint64) (Resource, error) {
	var lastErr error
	for attempt := 0; attempt < readAttempts; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 50 * time.Microsecond)
		}
		ts, err := readU64(mem, addr+offPublishedAt)
		if err != nil {
			return Resource{}, fmt.Errorf("read timestamp: %w", err)
		}
		if ts == 0 {
			lastErr = fmt.Errorf("%w: timestamp is 0", ErrUpdating)
			continue
		}
		var b [HeaderSize]byte
		if _, err := mem.ReadAt(b[:], int64(addr)); err != nil {
			return Resource{}, fmt.Errorf("read header: %w", err)
		}
		h, err := ParseHeader(b[:])
		if err != nil {
			return Resource{}, err
		}
		var payload []byte
		var payloadErr error
		switch {
		case h.PublishedAt != ts:
			lastErr = fmt.Errorf("%w: timestamp changed during the read", ErrUpdating)
			continue
		case h.PayloadSize > MaxPayloadSize:
			payloadErr = fmt.Errorf("%w: payload of %d bytes, limit %d", ErrInvalid, h.PayloadSize, MaxPayloadSize)
		case h.Payload == 0 && h.PayloadSize > 0:
			payloadErr = fmt.Errorf("%w: null payload pointer", ErrInvalid)
		default:
			payload = make([]byte, h.PayloadSize)
			if _, err := mem.ReadAt(payload, int64(h.Payload)); err != nil {
				payloadErr = fmt.Errorf("%w: read payload: %w", ErrInvalid, err)
			}
		}
		// The payload's errors count only if the header did not change
		// under us: an update may have freed the old payload.
		ts2, err := readU64(mem, addr+offPublishedAt)
		if err != nil {
			return Resource{}, fmt.Errorf("re-read timestamp: %w", err)
		}
		if ts2 != ts {
			lastErr = fmt.Errorf("%w: timestamp changed during the read", ErrUpdating)
			continue
		}
		if payloadErr != nil {
			return Resource{}, payloadErr
		}
		r, err := DecodePayload(payload)
		if err != nil {
			return Resource{}, err
		}
		r.PublishedAt = ts
		r.Addr = addr
		return r, nil
	}
	return Resource{}, fmt.Errorf("after %d attempts: %w", readAttempts, lastErr)
}
