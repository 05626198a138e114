// Package measure is what the measuring tools under test/ (make overhead,
// make cost) share: starting the collector and other helper processes and
// waiting for their log lines, reading a process's CPU time and memory from
// /proc, scraping the collector's own Prometheus metrics, and describing the
// machine a measurement ran on. It is not for tests: those have
// internal/testchild.
package measure
