package s3upload

import "testing"

// TestKeyGolden is dial9's golden example of the v1 layout (see
// docs/dial9-span-contract.md, C.2): the prefix verbatim, the five
// partition values escaped.
func TestKeyGolden(t *testing.T) {
	got := Key(KeyParts{
		Prefix:   "company/date=archive/%25",
		Service:  "payments/api",
		Instance: "us-east-1/i-0abc123",
		Boot:     "boot%=1",
		Epoch:    1786736220, // 2026-08-14 19:37:00 UTC
		Index:    3,
		Gzip:     true,
	})
	want := "company/date=archive/%25/version=1/date=2026-08-14/service=payments%2Fapi/time=1937/instance=us-east-1%2Fi-0abc123/boot=boot%25%3D1/1786736220-3.bin.gz"
	if got != want {
		t.Errorf("key\n got %s\nwant %s", got, want)
	}
}

func TestHiveEscape(t *testing.T) {
	for in, want := range map[string]string{
		"":               "",
		"plain-Name_1.":  "plain-Name_1.",
		"a b":            "a b",
		"\x00\x1f\x7f":   "%00%1F%7F",
		`"#%'*/:=?\{[]^`: "%22%23%25%27%2A%2F%3A%3D%3F%5C%7B%5B%5D%5E",
		"héllo}":         "héllo}",
	} {
		if got := hiveEscape(in); got != want {
			t.Errorf("hiveEscape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestKeyNoPrefix(t *testing.T) {
	got := Key(KeyParts{Service: "s", Instance: "i", Boot: "b", Epoch: 0, Index: 0})
	if want := "version=1/date=1970-01-01/service=s/time=0000/instance=i/boot=b/0-0.bin"; got != want {
		t.Errorf("got %s want %s", got, want)
	}
}
