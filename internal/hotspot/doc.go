// Package hotspot talks to HotSpot JVMs through their dynamic attach
// mechanism, as the JDK's jcmd and jattach do, with no JDK on our side and
// no flags on the JVM's.
//
// perfprof needs two things from a JVM that perf cannot see: the symbols
// of JIT-compiled code, which [PerfMap] has the JVM write to its perf map,
// and the full names of its threads, which Linux truncates to 15 bytes and
// [ThreadNames] reads from a thread dump. [Exec] runs any other command of
// the attach protocol.
package hotspot
