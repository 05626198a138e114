//! tokioctx: the ground-truth workload of perfprof's tokio test. A tokio
//! multi-thread runtime runs many concurrent "requests", each a task in its
//! own span; every poll of a task makes its span the worker thread's OTEP
//! 4947 thread context (otel_thread_ctx_v1 points at the span's record while
//! the task runs, and back at what was there when it yields), the way an
//! instrumented async runtime would. Tasks burn the CPU in short chunks and
//! yield between them, so each worker interleaves many open spans; one
//! background task burns outside any span.
//!
//!     tokioctx -out TRUTH [-duration SECS] [-tasks N] [-workers N]
//!
//! Prints "ready PID", waits for a line on stdin, runs, writes TRUTH and
//! prints "done". TRUTH has a line per chunk of CPU work: "TID START END
//! SPAN ROUTE" (CLOCK_MONOTONIC ns; SPAN 16 hex digits, or "-" outside a
//! span; ROUTE alpha, beta or background).

use std::future::Future;
use std::hint::black_box;
use std::io::{BufRead, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    fn gettid() -> i32;
    fn otel_ctx_swap(rec: *const Record) -> *const Record;
}

const CLOCK_MONOTONIC: i32 = 1;

fn now_ns() -> u64 {
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { clock_gettime(CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The OTEP 4947 Thread-Local Context Record, without attributes.
#[repr(C, packed)]
struct Record {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    valid: u8,
    trace_flags: u8,
    attrs_size: u16,
}

/// WithSpan polls a future with its span as the thread's context, as
/// tracing's Instrumented enters its span on every poll.
struct WithSpan<F> {
    rec: Box<Record>,
    inner: F,
}

impl<F: Future> Future for WithSpan<F> {
    type Output = F::Output;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Safety: inner is never moved out of the pinned WithSpan.
        let this = unsafe { self.get_unchecked_mut() };
        let prev = unsafe { otel_ctx_swap(&*this.rec) };
        let r = unsafe { Pin::new_unchecked(&mut this.inner) }.poll(cx);
        unsafe { otel_ctx_swap(prev) };
        r
    }
}

struct Chunk {
    tid: i32,
    start: u64,
    end: u64,
    span: Option<[u8; 8]>,
    route: &'static str,
}

type Truth = Arc<Mutex<Vec<Chunk>>>;

#[inline(never)]
fn burn_alpha(until: u64) -> u64 {
    let mut x = 1u64;
    while now_ns() < until {
        for _ in 0..2000 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    x
}

#[inline(never)]
fn burn_beta(until: u64) -> u64 {
    let mut x = 3u64;
    while now_ns() < until {
        for _ in 0..2000 {
            x = black_box(x.wrapping_mul(2862933555777941757).wrapping_add(3));
        }
    }
    x
}

#[inline(never)]
fn burn_background(until: u64) -> u64 {
    let mut x = 5u64;
    while now_ns() < until {
        for _ in 0..2000 {
            x = black_box(x.wrapping_mul(3935559000370003845).wrapping_add(7));
        }
    }
    x
}

/// chunk burns the CPU for d in route's function and records it.
fn chunk(truth: &Truth, route: &'static str, span: Option<[u8; 8]>, d: u64) {
    let tid = unsafe { gettid() };
    let start = now_ns();
    let until = start + d;
    black_box(match route {
        "alpha" => burn_alpha(until),
        "beta" => burn_beta(until),
        _ => burn_background(until),
    });
    let end = now_ns();
    truth.lock().unwrap().push(Chunk { tid, start, end, span, route });
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        for c in b.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
        b[0] |= 1; // never the all-zero invalid id
        b
    }
}

/// request is one span's work: chunks of 100-400 µs, yielding between
/// them, and now and then awaiting a timer (the task is off its worker
/// then, the span open).
async fn request(truth: Truth, route: &'static str, span: [u8; 8], mut rng: Rng) {
    let chunks = 3 + rng.next() % 10;
    for i in 0..chunks {
        chunk(&truth, route, Some(span), 100_000 + rng.next() % 300_000);
        if i % 4 == 3 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        } else {
            tokio::task::yield_now().await;
        }
    }
}

fn arg(args: &[String], name: &str, def: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| def.to_string())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out = arg(&args, "-out", "");
    if out.is_empty() {
        eprintln!("tokioctx: -out is required");
        std::process::exit(2);
    }
    let secs: f64 = arg(&args, "-duration", "3").parse().expect("-duration");
    let tasks: usize = arg(&args, "-tasks", "16").parse().expect("-tasks");
    let workers: usize = arg(&args, "-workers", "2").parse().expect("-workers");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_time()
        .build()
        .expect("tokio runtime");
    println!("ready {}", std::process::id());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();

    let truth: Truth = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    rt.block_on(async {
        let mut handles = Vec::new();
        for t in 0..tasks {
            let (truth, stop) = (truth.clone(), stop.clone());
            handles.push(tokio::spawn(async move {
                let mut rng = Rng(0x9e3779b97f4a7c15 ^ (t as u64 + 1).wrapping_mul(now_ns()));
                let route = if t % 2 == 0 { "alpha" } else { "beta" };
                while !stop.load(Ordering::Relaxed) {
                    let rec = Box::new(Record {
                        trace_id: rng.bytes(),
                        span_id: rng.bytes(),
                        valid: 1,
                        trace_flags: 1,
                        attrs_size: 0,
                    });
                    let span = rec.span_id;
                    let seed = Rng(rng.next() | 1);
                    WithSpan { rec, inner: request(truth.clone(), route, span, seed) }.await;
                }
            }));
        }
        {
            let (truth, stop) = (truth.clone(), stop.clone());
            handles.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    chunk(&truth, "background", None, 200_000);
                    tokio::task::yield_now().await;
                }
            }));
        }
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.await.unwrap();
        }
    });

    let mut f = std::io::BufWriter::new(std::fs::File::create(&out).expect("create truth file"));
    for c in truth.lock().unwrap().iter() {
        let span = match c.span {
            Some(s) => s.iter().map(|b| format!("{:02x}", b)).collect::<String>(),
            None => "-".into(),
        };
        writeln!(f, "{} {} {} {} {}", c.tid, c.start, c.end, span, c.route).unwrap();
    }
    f.flush().unwrap();
    println!("done");
    std::io::stdout().flush().unwrap();
}
