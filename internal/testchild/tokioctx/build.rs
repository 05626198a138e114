// Compiles ctx.c (the exported otel_thread_ctx_v1) with the system's C
// compiler into a static library: the cc crate is not needed for one file.
use std::{env, path::PathBuf, process::Command};

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let obj = out.join("ctx.o");
    let lib = out.join("libotelctx.a");
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let ok = Command::new(&cc)
        .args(["-O2", "-fPIC", "-c", "ctx.c", "-o"])
        .arg(&obj)
        .status()
        .expect("run the C compiler")
        .success();
    assert!(ok, "compile ctx.c");
    let ok = Command::new("ar").arg("crs").arg(&lib).arg(&obj).status().expect("run ar").success();
    assert!(ok, "archive ctx.o");
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=otelctx");
    println!("cargo:rustc-link-arg=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1");
    println!("cargo:rerun-if-changed=ctx.c");
}
