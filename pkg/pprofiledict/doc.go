// Package pprofiledict builds the ProfilesDictionary of pdata profiles: it
// interns strings, attributes, links, mappings, functions, locations and
// stacks with maps, so that an entry is added once and found again in
// constant time (pdata's own Set*/Put* helpers search the tables linearly).
//
// Index 0 of every table is the empty entry, as the OTLP profiles format
// requires: a zero index in a sample, location or function means "none".
//
// It is for code that writes profiles: the perfprof receiver and the test
// builders that make profiles as the receiver does. It is not a reader (the
// tracefile exporter reads dictionaries itself) and it does not build the
// profiles around the dictionary.
//
// The package lives under pkg/, as collector-contrib keeps its shared pdata
// helpers, because it imports the collector's pdata; perfprof's internal
// packages do not.
package pprofiledict
