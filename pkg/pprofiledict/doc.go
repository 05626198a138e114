// Package pprofiledict is the codec of perfprof's pdata profiles: the
// writer half (Builder) interns strings, attributes, links, mappings,
// functions, locations and stacks into a ProfilesDictionary with maps, so
// that an entry is added once and found again in constant time (pdata's
// own Set*/Put* helpers search the tables linearly); the reader half
// (Reader, and Decode on top of it) reads them back into the same values.
//
// Index 0 of every table is the empty entry, as the OTLP profiles format
// requires: a zero index in a sample, location or function means "none".
//
// What the receiver knows crosses the boundary as attributes of the
// convention (internal/convention, docs/trace-conventions.md), written and
// read here both ways, so that no reader guesses it back: a sample's
// Labels (thread, CPU, CPU delta, state, worker, root span, link source), a
// location's kind (kernel or not), a profile's type and the clock offset
// its times were converted with. Span and trace ids stay bytes (pdata's
// links carry them natively).
//
// It is for the perfprof receiver, which writes profiles, the tracefile
// exporter, which reads them, and the tests of both. It does not build
// the profiles around the dictionary: that is the receiver's.
//
// The package lives under pkg/, as collector-contrib keeps its shared pdata
// helpers, because it imports the collector's pdata; perfprof's internal
// packages do not.
package pprofiledict
