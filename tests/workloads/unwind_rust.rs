// unwind_rust - a Rust release build (rustc -C opt-level=3; Rust omits
// frame pointers by default): main -> run -> checksum_blocks -> mix_block.
// usage: unwind_rust SECONDS
use std::hint::black_box;
use std::time::Instant;

#[inline(never)]
fn mix_block(block: &[u64; 64], seed: u64) -> u64 {
    let mut x = seed;
    for _ in 0..50 {
        for v in block.iter() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(*v);
        }
    }
    x
}

#[inline(never)]
fn checksum_blocks(blocks: &[[u64; 64]], seed: u64) -> u64 {
    let mut acc = seed;
    for b in blocks {
        acc ^= mix_block(black_box(b), acc);
    }
    acc
}

#[inline(never)]
fn run(seconds: f64) -> u64 {
    let mut blocks = vec![[0u64; 64]; 64];
    for (i, b) in blocks.iter_mut().enumerate() {
        for (j, v) in b.iter_mut().enumerate() {
            *v = (i * 64 + j) as u64;
        }
    }
    let start = Instant::now();
    let mut acc = 1u64;
    while start.elapsed().as_secs_f64() < seconds {
        acc = checksum_blocks(black_box(&blocks), acc);
    }
    acc
}

fn main() {
    let seconds: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let start = Instant::now();
    let acc = run(seconds);
    black_box(acc);
    println!("{{\"cpu_seconds\": {:.3}}}", start.elapsed().as_secs_f64());
}
