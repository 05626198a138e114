// Package otelctx reads the two contexts that OpenTelemetry SDKs publish for
// out-of-process readers such as profilers, from user space:
//
//   - the process context of OTEP 4719: a mapping named OTEL_CTX whose
//     32-byte header points at a protobuf ProcessContext (the SDK's resource
//     and the threadlocal.* reference data); see [ProcessContext];
//   - the thread context of OTEP 4947: the ELF thread-local variable
//     otel_thread_ctx_v1, a pointer to a record holding the thread's active
//     trace id, span id, trace flags and a few attributes; see
//     [ThreadContext], [LocateTLS] and [ParseRecord];
//   - the same record in a Node.js process (schema nodejs_v1_dev), reached
//     from the discovery struct otel_thread_ctx_nodejs_v1 through V8's
//     AsyncContextFrame; see [NodeRecord] and [LocateTLSSymbol] (the walk
//     alone, for now: the readers of processes and samples do not use it).
//
// It is the reference and test oracle for the eBPF reader, which reads the
// same bytes at sample time: [TLSVar] is what that program needs per process
// (a thread-pointer offset for static TLS, a module id and offset for dynamic
// TLS), and [TLSVar.Address] is the walk it performs. docs/otel-contexts.md
// describes both formats byte by byte.
//
// What it is not for: publishing (SDKs do that), and sampling. Reading a
// thread's record is only meaningful while the thread is stopped (OTEP 4947
// relies on signal-handler semantics instead of memory barriers); a caller
// that reads a running thread gets a best-effort answer.
//
// Platform: Linux on x86-64 with glibc. The thread pointer of a thread
// (fs_base) is found without stopping it, by walking glibc's list of threads
// as libthread_db does ([ThreadPointer]); static binaries and musl are not
// supported by that walk, and a caller that knows fs_base (the eBPF program
// reads task->thread.fsbase) passes it to [Process.ThreadContextAt].
package otelctx
