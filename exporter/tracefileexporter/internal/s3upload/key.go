package s3upload

import (
	"strconv"
	"strings"
	"time"
)

// hiveEscape escapes a partition value as dial9's segment_object_key.rs
// does (S3 layout v1, Hive path escaping): ASCII control bytes, 0x7F and
// "#%'*/:=?\{[]^ become %XX with upper-case hex; other bytes, UTF-8
// included, stay as they are.
func hiveEscape(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7F || strings.IndexByte(`"#%'*/:=?\{[]^`, c) >= 0 {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xF])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// KeyParts are what names a segment in dial9's S3 layout v1.
type KeyParts struct {
	Prefix   string // inserted verbatim; "" = the key starts at version=1
	Service  string
	Instance string
	Boot     string
	Epoch    int64 // the segment's start, Unix seconds
	Index    int   // the rotator's segment number
	Gzip     bool  // .bin.gz, else .bin
}

// Key returns the object key of a segment:
// {prefix}/version=1/date=YYYY-MM-DD/service=S/time=HHMM/instance=I/boot=B/{epoch}-{index}.bin[.gz],
// date and time in UTC from Epoch.
func Key(p KeyParts) string {
	t := time.Unix(p.Epoch, 0).UTC()
	var b strings.Builder
	if p.Prefix != "" {
		b.WriteString(p.Prefix)
		if !strings.HasSuffix(p.Prefix, "/") {
			b.WriteByte('/')
		}
	}
	b.WriteString("version=1/date=")
	b.WriteString(hiveEscape(t.Format("2006-01-02")))
	b.WriteString("/service=")
	b.WriteString(hiveEscape(p.Service))
	b.WriteString("/time=")
	b.WriteString(hiveEscape(t.Format("1504")))
	b.WriteString("/instance=")
	b.WriteString(hiveEscape(p.Instance))
	b.WriteString("/boot=")
	b.WriteString(hiveEscape(p.Boot))
	b.WriteByte('/')
	b.WriteString(strconv.FormatInt(p.Epoch, 10))
	b.WriteByte('-')
	b.WriteString(strconv.Itoa(p.Index))
	b.WriteString(".bin")
	if p.Gzip {
		b.WriteString(".gz")
	}
	return b.String()
}
