package goruntime

import "go/version"

// known holds the layouts of the releases measured from the DWARF of
// binaries built with them (go1.23.12, go1.24.13, go1.25.5, go1.26.8),
// for binaries built without DWARF. Patch releases do not move runtime
// fields. TestKnownMatchesDWARF checks the entries of the toolchains
// present on the machine.
var known = map[string]Layout{
	"go1.23": {GM: 48, GLabels: 352, MCurg: 192, GGoid: 160, Labels: LabelsMap},
	"go1.24": {GM: 48, GLabels: 352, MCurg: 192, GGoid: 160, Labels: LabelsSlice, LabelSize: 32, LabelValue: 16},
	"go1.25": {GM: 48, GLabels: 344, MCurg: 184, GGoid: 152, Labels: LabelsSlice, LabelSize: 32, LabelValue: 16},
	"go1.26": {GM: 48, GLabels: 352, MCurg: 184, GGoid: 152, Labels: LabelsSlice, LabelSize: 32, LabelValue: 16},
}

// Known returns the fallback layout of a Go release ("go1.26.8"), with
// TLSG and GoVersion unset, and whether the release is in the table.
// Without DWARF nothing says whether runtime/pprof is linked in; the
// table assumes it is, which is harmless: g.labels then stays nil.
func Known(goVersion string) (Layout, bool) {
	l, ok := known[version.Lang(goVersion)]
	return l, ok
}
