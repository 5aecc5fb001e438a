// symbols_cpp - a C++ workload for symbolization: built with -O2 -g, then
// stripped (build/workloads/symbols_cpp.stripped) for profiling, so frames
// can only be named from uploaded symbols. process_batch() is a real
// function into which the compiler inlines checksum() and mix_word(); with
// DWARF, ember shows them as frames of their own, with files and lines.
// main -> run_batches -> process_batch -> [checksum -> mix_word]. usage: symbols_cpp SECONDS
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

namespace work {

static inline __attribute__((always_inline)) uint64_t mix_word(uint64_t h, uint64_t w)
{
	h ^= w;
	h *= 0x100000001b3ull;
	return h ^ (h >> 29);
}

static inline __attribute__((always_inline)) uint64_t checksum(const std::vector<uint64_t> &v)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (int round = 0; round < 64; round++)
		for (uint64_t w : v)
			h = mix_word(h, w + (uint64_t)round);
	return h;
}

__attribute__((noinline)) uint64_t process_batch(const std::vector<uint64_t> &v, uint64_t salt)
{
	return checksum(v) ^ salt;
}

__attribute__((noinline)) uint64_t run_batches(double seconds)
{
	std::vector<uint64_t> v(512);
	for (size_t i = 0; i < v.size(); i++)
		v[i] = i * 2654435761u;
	timespec t0, t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
	uint64_t acc = 0, n = 0;
	do {
		acc += process_batch(v, n++);
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	} while ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 < seconds);
	return acc;
}

} // namespace work

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	volatile uint64_t r = work::run_batches(seconds);
	(void)r;
	std::printf("{\"cpu_seconds\": %.3f}\n", seconds);
	return 0;
}
