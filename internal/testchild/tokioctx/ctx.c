/*
 * The OTEP 4947 thread-local variable of the tokio test child. Stable Rust
 * cannot name an ELF TLS symbol (#[thread_local] is unstable), so, as some
 * SDKs do, the variable is defined in C and exported from the executable
 * (-Wl,--export-dynamic-symbol=otel_thread_ctx_v1, set by build.rs).
 */
__attribute__((visibility("default"))) __thread void *otel_thread_ctx_v1;

/* otel_ctx_swap makes rec the thread's active record (NULL: none) and
 * returns the one it replaces. Only the thread itself writes its variable,
 * and readers interrupt it, so compiler fences are enough (OTEP 4947). */
void *otel_ctx_swap(void *rec)
{
	void *old = otel_thread_ctx_v1;
	__asm__ volatile("" ::: "memory");
	otel_thread_ctx_v1 = rec;
	__asm__ volatile("" ::: "memory");
	return old;
}
