// nofp.rs is the Rust target, built as the release profile builds (opt
// level 3, no frame pointers), its second thread a std::thread.
use std::hint::black_box;
#[inline(never)]
fn level3(i: u64) -> u64 {
    let mut v: Vec<u64> = (0..2000u64).map(|k| (k * 7919 + i) % 1000).collect();
    v.sort_unstable();
    black_box(v.iter().map(|x| x.wrapping_mul(31)).sum::<u64>())
}
#[inline(never)]
fn level2(i: u64) -> u64 { let s = level3(i); black_box(s ^ 3) }
#[inline(never)]
fn level1(i: u64) -> u64 { let s = level2(i); black_box(s + 1) }
#[inline(never)]
fn worker() { let mut i = 0u64; loop { black_box(level1(i)); i += 1; } }
fn main() {
    std::thread::spawn(worker);
    println!("ready {}", std::process::id());
    worker();
}
