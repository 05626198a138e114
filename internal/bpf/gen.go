package bpf

// The objects and their Go bindings are generated and committed, so that
// building perfprof needs no clang; `make generate` installs Debian's
// clang-19, llvm-19 and libbpf-dev and reruns this. sum.go records the
// SHA-256 of the C sources the objects were built from
// (TestObjectsMatchSources).

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 -type sample_labels -type sample_ctx -type target -type acct_event -type acct_result -type acct_batch -type sched_record -type thread_acct -type pidns_check -cflags "-O2 -g -Wall -Werror" spanctx spanctx.bpf.c -- -I/usr/include/x86_64-linux-gnu
//go:generate go run ./internal/sourcesum/gen -o sum.go .
